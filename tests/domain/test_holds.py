"""What holds a blocked task decides what may release it (R13, R15; the seed's Bug-B)."""

from __future__ import annotations

from task_factory import START, make_task

from agentqueue.domain.states import (
    HOLD_APPROVAL,
    HOLD_DEPENDENCIES,
    Action,
    Refusal,
    Request,
    TaskState,
    decide,
)


def test_a_dependency_release_of_an_approval_hold_is_refused() -> None:
    held = make_task(TaskState.BLOCKED).evolve(hold=HOLD_APPROVAL)
    refused = decide(held, Request(Action.UNBLOCK, START, hold=HOLD_DEPENDENCIES))
    assert isinstance(refused, Refusal)
    assert "held for approval, not for dependencies" in refused.message


def test_a_dependency_release_of_a_dependency_hold_clears_the_hold() -> None:
    held = make_task(TaskState.BLOCKED).evolve(hold=HOLD_DEPENDENCIES)
    released = decide(held, Request(Action.UNBLOCK, START, hold=HOLD_DEPENDENCIES))
    assert not isinstance(released, Refusal)
    assert released.to_state is TaskState.PENDING and released.changes["hold"] is None


def test_a_block_that_names_no_hold_waits_for_a_person() -> None:
    blocked = decide(make_task(TaskState.PENDING), Request(Action.BLOCK, START))
    assert not isinstance(blocked, Refusal)
    assert blocked.changes["hold"] == HOLD_APPROVAL
