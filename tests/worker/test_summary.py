"""The run summary counts tasks by how they ended in the run, and failed attempts apart."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import UUID, uuid4

from agentqueue.domain.states import Action, Refusal, RefusalKind
from agentqueue.domain.task_state import TaskState
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.worker.summary import RunSummary


def task(task_id: UUID, state: TaskState = TaskState.EXECUTING) -> Any:
    return SimpleNamespace(id=task_id, state=state)


def outcome(task_id: UUID, kind: OutcomeKind) -> Outcome:
    return Outcome(task_id, uuid4(), kind)


def test_a_task_that_failed_then_completed_counts_once_as_completed() -> None:
    summary = RunSummary()
    flaky, fatal, dead, gone, lost, shut = (uuid4() for _ in range(6))
    for t in (flaky, fatal, dead, gone, lost, shut):
        summary.claimed(task(t))
    summary.recorded(
        [outcome(flaky, OutcomeKind.FAILED), outcome(fatal, OutcomeKind.FAILED)],
        {flaky: task(flaky, TaskState.RETRYING), fatal: task(fatal, TaskState.FAILED)},
    )
    summary.claimed(task(flaky))
    summary.recorded(
        [outcome(flaky, OutcomeKind.COMPLETED), outcome(dead, OutcomeKind.FAILED)],
        {flaky: task(flaky, TaskState.COMPLETED), dead: task(dead, TaskState.DEAD_LETTER)},
    )
    summary.no_outcome(task(gone))
    summary.recorded(
        [outcome(lost, OutcomeKind.COMPLETED), outcome(shut, OutcomeKind.RELEASED)],
        {
            lost: Refusal(lost, Action.COMPLETE, TaskState.QUEUED, RefusalKind.FENCED, "fenced"),
            shut: task(shut, TaskState.QUEUED),
        },
    )
    counts = summary.counts()
    assert counts["tasks"] == 6
    assert {k: v for k, v in counts.items() if v and k != "tasks"} == {
        "completed": 1,
        "failed": 1,
        "dead_lettered": 1,
        "stopped": 1,
        "not_recorded": 1,
        "released": 1,
        "retried_attempts": 1,
    }
    assert summary.line() == (
        "6 tasks: 1 completed, 1 failed for good, 1 dead-lettered, 1 released at shutdown, "
        "1 stopped without an outcome, 1 outcome refused; "
        "1 attempt failed and went back to retry"
    )


def test_a_long_run_remembers_only_the_tasks_whose_ending_may_still_change() -> None:
    """Ten thousand tasks completed, a hundred waiting to retry, one stopped: the counts hold
    every one, and only the hundred and one are remembered by id (a worker running for weeks
    must not keep an entry for every task it ran)."""
    summary = RunSummary()
    done = [uuid4() for _ in range(10_000)]
    retrying = [uuid4() for _ in range(100)]
    stopped = uuid4()
    for t in (*done, *retrying, stopped):
        summary.claimed(task(t))
    summary.recorded(
        [outcome(t, OutcomeKind.COMPLETED) for t in done],
        {t: task(t, TaskState.COMPLETED) for t in done},
    )
    summary.recorded(
        [outcome(t, OutcomeKind.FAILED) for t in retrying],
        {t: task(t, TaskState.RETRYING) for t in retrying},
    )
    summary.no_outcome(task(stopped))
    counts = summary.counts()
    assert counts["tasks"] == 10_101
    assert (counts["completed"], counts["retrying"], counts["stopped"]) == (10_000, 100, 1)
    assert summary.remembered == 101
    # A retried task that then completes is still one task, now completed.
    summary.claimed(task(retrying[0]))
    summary.recorded(
        [outcome(retrying[0], OutcomeKind.COMPLETED)],
        {retrying[0]: task(retrying[0], TaskState.COMPLETED)},
    )
    counts = summary.counts()
    assert counts["tasks"] == 10_101
    assert (counts["completed"], counts["retrying"]) == (10_001, 99)
    assert summary.remembered == 100
