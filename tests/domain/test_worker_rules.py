"""The worker's domain rules: tool call ids, retryable failures, preemption victims."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from task_factory import START, make_task

from agentqueue.domain.models import Task
from agentqueue.domain.preemption import could_run, preemption_victim
from agentqueue.domain.retry import failure_is_retryable
from agentqueue.domain.states import TaskState
from agentqueue.domain.tools import next_tool_call_id


def test_tool_calls_are_numbered_over_the_task_s_whole_life() -> None:
    assert next_tool_call_id(0) == "call-1"
    assert next_tool_call_id(1) == "call-2"
    assert next_tool_call_id(41) == "call-42"


def test_a_timeout_is_retryable_whatever_the_executor_said() -> None:
    assert failure_is_retryable(retryable=False, timed_out=True)
    assert failure_is_retryable(retryable=True, timed_out=False)
    assert not failure_is_retryable(retryable=False, timed_out=False)


def _running(n: int, priority: int, started_secs_ago: float) -> Task:
    return make_task(
        TaskState.EXECUTING,
        id=UUID(int=n),
        priority=priority,
        started_at=START - timedelta(seconds=started_secs_ago),
    )


def test_the_victim_is_the_least_urgent_then_the_longest_running() -> None:
    tasks = [_running(1, 7, 10), _running(2, 9, 5), _running(3, 9, 8), _running(4, 8, 60)]
    victim = preemption_victim(tasks, START, min_priority=7, after_secs=3)
    assert victim is not None and victim.id == UUID(int=3)


def test_no_victim_among_urgent_or_fresh_tasks() -> None:
    tasks = [_running(1, 6, 100), _running(2, 9, 2), _running(3, 9, 3)]
    assert preemption_victim(tasks, START, min_priority=7, after_secs=3) is None
    assert preemption_victim([], START, min_priority=7, after_secs=3) is None


def test_an_executor_could_run_a_p0_task_of_its_type_or_routed_to_its_agent() -> None:
    assert could_run({"bugfix"}, set(), [(None, "bugfix")])
    assert not could_run({"bugfix"}, set(), [(None, "docs")])
    assert could_run(set(), {"coder"}, [("coder", "docs")])
    # A task routed to an agent goes only to that agent, whatever the type.
    assert not could_run({"docs"}, set(), [("coder", "docs")])
    assert not could_run({"bugfix"}, {"coder"}, [])
