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
