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


def test_a_person_approves_or_rejects_only_what_a_guardrail_holds() -> None:
    for action in (Action.APPROVE, Action.REJECT):
        waiting = make_task(TaskState.BLOCKED).evolve(hold=HOLD_DEPENDENCIES)
        refused = decide(waiting, Request(action, START, actor="lead"))
        assert isinstance(refused, Refusal)
        assert "held for dependencies, not for approval" in refused.message
    held = make_task(TaskState.BLOCKED).evolve(hold=HOLD_APPROVAL)
    approved = decide(held, Request(Action.APPROVE, START, actor="lead", reason="ok"))
    assert not isinstance(approved, Refusal)
    assert approved.to_state is TaskState.PENDING
    assert approved.changes["approved_by"] == "lead" and approved.changes["hold"] is None
    assert approved.data == {"approved_by": "lead"}
    rejected = decide(held, Request(Action.REJECT, START, actor="lead", reason="no"))
    assert not isinstance(rejected, Refusal)
    assert rejected.to_state is TaskState.CANCELLED
    assert rejected.changes["state_reason"] == "rejected by lead: no"


def test_an_admission_records_the_agent_routing_chose() -> None:
    admitted = decide(make_task(TaskState.PENDING), Request(Action.ADMIT, START, agent="fixer"))
    assert not isinstance(admitted, Refusal)
    assert admitted.changes["agent"] == "fixer" and admitted.data == {"agent": "fixer"}
    unrouted = decide(make_task(TaskState.PENDING), Request(Action.ADMIT, START))
    assert not isinstance(unrouted, Refusal)
    assert unrouted.changes["agent"] is None and unrouted.data == {}
