"""REPRIORITIZE: a live task gets another priority in place, audited with the old and new."""

from __future__ import annotations

from typing import Any

import pytest
from task_factory import START, make_task

from agentqueue.domain.states import (
    IN_PLACE_ACTIONS,
    LIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Action,
    Refusal,
    RefusalKind,
    Request,
    TaskState,
    Transition,
    decide,
)


def _req(priority: int | None, **fields: Any) -> Request:
    return Request(Action.REPRIORITIZE, START, actor="octocat", priority=priority, **fields)


@pytest.mark.parametrize("state", sorted(LIVE_STATES), ids=str)
def test_a_live_task_keeps_its_state_and_takes_the_new_priority(state: TaskState) -> None:
    task = make_task(state, priority=5)
    outcome = decide(task, _req(9))
    assert isinstance(outcome, Transition), outcome
    assert outcome.from_state is state and outcome.to_state is state
    assert outcome.changes == {"priority": 9}
    assert outcome.data == {"priority": 9, "previous_priority": 5}
    assert outcome.actor == "octocat" and "5 -> 9" in outcome.reason
    after = outcome.apply(task)
    assert after.priority == 9 and after.state is state
    # The lease of an executing task is left alone: it runs on.
    assert after.lock_token == task.lock_token


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES), ids=str)
def test_a_finished_task_refuses(state: TaskState) -> None:
    outcome = decide(make_task(state), _req(0, reason="urgent"))
    assert isinstance(outcome, Refusal) and outcome.kind is RefusalKind.NOT_ALLOWED
    assert state.value in str(outcome) and "priority" in str(outcome)


def test_the_same_priority_is_refused_saying_so() -> None:
    outcome = decide(make_task(TaskState.QUEUED, priority=5), _req(5))
    assert isinstance(outcome, Refusal) and "already has priority 5" in outcome.message


def test_p0_needs_an_idempotency_key() -> None:
    keyless = decide(make_task(TaskState.PENDING), _req(0))
    assert isinstance(keyless, Refusal) and "idempotency key" in keyless.message
    keyed = decide(make_task(TaskState.PENDING, idempotency_key="o/r#1/c/9"), _req(0))
    assert isinstance(keyed, Transition) and keyed.changes == {"priority": 0}


@pytest.mark.parametrize("priority", [None, -1, 10])
def test_a_request_without_a_valid_priority_is_a_programming_error(priority: int | None) -> None:
    with pytest.raises(ValueError, match="priority"):
        decide(make_task(TaskState.PENDING), _req(priority))


def test_it_is_the_only_in_place_action_and_adds_no_edge_to_the_table() -> None:
    assert frozenset({Action.REPRIORITIZE}) == IN_PLACE_ACTIONS
    assert all(a is not b for a, b in TRANSITIONS)
