"""The table of SPEC section 2, edge by edge: each is reachable, nothing else ever is."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from task_factory import HOLDER_TOKEN, OTHER_TOKEN, START, WORKER, make_task

from agentqueue.domain.errors import LeaseLost, TransitionRefused
from agentqueue.domain.models import Task
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
    creation,
    decide,
    decide_or_raise,
)

S = TaskState
LATER = START + timedelta(hours=1)
NEW_TOKEN = OTHER_TOKEN

Recipe = Callable[[], tuple[Task, Request]]


WAIT_CALL = {"id": "call-2", "name": "search", "args": {}}


def _req(action: Action, **fields: Any) -> Request:
    return Request(action, LATER, actor="ops-person", **fields)


def _exhausted(state: TaskState) -> Task:
    return make_task(state, max_retries=2, retry_count=2)


def _cancel_from(state: TaskState) -> Recipe:
    return lambda: (make_task(state), _req(Action.CANCEL))


# For each edge, every way the SPEC's "when" column reaches it: (label, build task and request).
RECIPES: dict[tuple[TaskState | None, TaskState], list[tuple[str, Recipe]]] = {
    (S.PENDING, S.BLOCKED): [("block", lambda: (make_task(S.PENDING), _req(Action.BLOCK)))],
    (S.BLOCKED, S.PENDING): [("unblock", lambda: (make_task(S.BLOCKED), _req(Action.UNBLOCK)))],
    (S.PENDING, S.QUEUED): [("admit", lambda: (make_task(S.PENDING), _req(Action.ADMIT)))],
    (S.QUEUED, S.EXECUTING): [
        (
            "claim",
            lambda: (
                make_task(S.QUEUED),
                _req(Action.CLAIM, new_lock_token=NEW_TOKEN, worker=WORKER),
            ),
        )
    ],
    (S.EXECUTING, S.WAITING_TOOL): [
        (
            "wait_tool",
            lambda: (
                make_task(S.EXECUTING),
                _req(Action.WAIT_TOOL, lock_token=HOLDER_TOKEN, tool_call=WAIT_CALL),
            ),
        )
    ],
    (S.WAITING_TOOL, S.QUEUED): [
        ("tool_result", lambda: (make_task(S.WAITING_TOOL), _req(Action.TOOL_RESULT))),
        (
            "tool_timeout with retries left",
            lambda: (make_task(S.WAITING_TOOL), _req(Action.TOOL_TIMEOUT)),
        ),
    ],
    (S.WAITING_TOOL, S.DEAD_LETTER): [
        (
            "tool_timeout without retries",
            lambda: (_exhausted(S.WAITING_TOOL), _req(Action.TOOL_TIMEOUT)),
        )
    ],
    (S.EXECUTING, S.COMPLETED): [
        (
            "complete",
            lambda: (make_task(S.EXECUTING), _req(Action.COMPLETE, lock_token=HOLDER_TOKEN)),
        )
    ],
    (S.EXECUTING, S.RETRYING): [
        (
            "retryable failure",
            lambda: (make_task(S.EXECUTING), _req(Action.FAIL, lock_token=HOLDER_TOKEN)),
        ),
        ("lease lapsed", lambda: (make_task(S.EXECUTING), _req(Action.LEASE_EXPIRED))),
    ],
    (S.RETRYING, S.PENDING): [
        (
            "backoff elapsed",
            lambda: (make_task(S.RETRYING, run_after=START), _req(Action.RETRY_DUE)),
        )
    ],
    (S.EXECUTING, S.FAILED): [
        (
            "non-retryable failure",
            lambda: (
                make_task(S.EXECUTING),
                _req(Action.FAIL, lock_token=HOLDER_TOKEN, retryable=False),
            ),
        )
    ],
    (S.EXECUTING, S.DEAD_LETTER): [
        (
            "retryable failure, retries exhausted",
            lambda: (_exhausted(S.EXECUTING), _req(Action.FAIL, lock_token=HOLDER_TOKEN)),
        ),
        (
            "lease lapsed, retries exhausted",
            lambda: (_exhausted(S.EXECUTING), _req(Action.LEASE_EXPIRED)),
        ),
    ],
    (S.RETRYING, S.DEAD_LETTER): [
        ("exhaust", lambda: (_exhausted(S.RETRYING), _req(Action.EXHAUST)))
    ],
    (S.EXECUTING, S.QUEUED): [
        (
            "release",
            lambda: (make_task(S.EXECUTING), _req(Action.RELEASE, lock_token=HOLDER_TOKEN)),
        ),
        (
            "preempt",
            lambda: (make_task(S.EXECUTING), _req(Action.PREEMPT, lock_token=HOLDER_TOKEN)),
        ),
    ],
    (S.DEAD_LETTER, S.MANUAL_REVIEW): [
        ("review", lambda: (make_task(S.DEAD_LETTER), _req(Action.REVIEW)))
    ],
    (S.DEAD_LETTER, S.QUEUED): [
        ("requeue", lambda: (_exhausted(S.DEAD_LETTER), _req(Action.REQUEUE)))
    ],
    (S.MANUAL_REVIEW, S.QUEUED): [
        ("requeue", lambda: (_exhausted(S.MANUAL_REVIEW), _req(Action.REQUEUE)))
    ],
    (S.DEAD_LETTER, S.ARCHIVED): [
        ("archive", lambda: (make_task(S.DEAD_LETTER), _req(Action.ARCHIVE)))
    ],
    (S.MANUAL_REVIEW, S.ARCHIVED): [
        ("archive", lambda: (make_task(S.MANUAL_REVIEW), _req(Action.ARCHIVE)))
    ],
    **{
        (state, S.CANCELLED): [("cancel", _cancel_from(state))]
        for state in TaskState
        if state in LIVE_STATES
    },
}
CASES = [
    pytest.param(edge, recipe, id=f"{edge[0]}->{edge[1]} by {label}")
    for edge, recipes in RECIPES.items()
    for label, recipe in recipes
]


def test_every_table_edge_but_creation_has_a_recipe() -> None:
    assert set(RECIPES) == set(TRANSITIONS) - {(None, S.PENDING)}


def test_creation_is_the_new_to_pending_edge() -> None:
    task = make_task(S.PENDING)
    transition = creation(task, "api")
    assert (transition.from_state, transition.to_state) == (None, S.PENDING)
    assert (None, S.PENDING) in TRANSITIONS
    assert transition.action is Action.SUBMIT and transition.at == task.created_at


@pytest.mark.parametrize(("edge", "recipe"), CASES)
def test_each_table_edge_is_reached_by_decide(
    edge: tuple[TaskState, TaskState], recipe: Recipe
) -> None:
    task, request = recipe()
    assert task.state is edge[0]
    outcome = decide(task, request)
    assert isinstance(outcome, Transition), outcome
    assert (outcome.from_state, outcome.to_state) == edge
    assert outcome.apply(task).state is edge[1]


# Every state, in the variants decide() distinguishes, against every action in its variants.
def _state_variants() -> list[Task]:
    tasks = []
    for state in TaskState:
        tasks.append(make_task(state))
        tasks.append(_exhausted(state))
        tasks.append(make_task(state, priority=0, max_retries=5, retry_count=3))
        tasks.append(make_task(state, run_after=LATER + timedelta(hours=1)))
    return tasks


def _request_variants(action: Action) -> list[Request]:
    return [
        Request(
            action,
            now,
            lock_token=token,
            retryable=retryable,
            new_lock_token=NEW_TOKEN,
            worker=WORKER,
            tool_call=WAIT_CALL,
            priority=2,
        )
        for now, token, retryable in itertools.product(
            (START, LATER + timedelta(days=1)),
            (None, HOLDER_TOKEN, OTHER_TOKEN),
            (True, False),
        )
    ]


def _every_outcome() -> list[tuple[Task, Request, Transition | Refusal]]:
    return [
        (task, request, decide(task, request))
        for task in _state_variants()
        for action in Action
        for request in _request_variants(action)
    ]


def test_no_pair_outside_the_table_is_ever_produced() -> None:
    produced = {
        (outcome.from_state, outcome.to_state)
        for _, _, outcome in _every_outcome()
        if isinstance(outcome, Transition) and outcome.action not in IN_PLACE_ACTIONS
    }
    assert produced <= set(TRANSITIONS)
    # And the table is all reached from existing tasks (only creation is not a decide()).
    assert produced == set(TRANSITIONS) - {(None, S.PENDING)}


def test_terminal_tasks_refuse_every_action() -> None:
    for task, request, outcome in _every_outcome():
        if task.state in TERMINAL_STATES:
            assert isinstance(outcome, Refusal), (task.state, request.action)
            assert outcome.kind in (RefusalKind.NOT_ALLOWED, RefusalKind.FENCED)


def test_submit_is_never_an_action_on_an_existing_task() -> None:
    outcome = decide(make_task(S.PENDING), _req(Action.SUBMIT))
    assert isinstance(outcome, Refusal) and outcome.kind is RefusalKind.NOT_ALLOWED


def test_refusal_names_the_state_and_action_in_a_clear_error() -> None:
    outcome = decide(make_task(S.COMPLETED), _req(Action.CANCEL))
    assert isinstance(outcome, Refusal)
    assert outcome.state is S.COMPLETED and outcome.kind is RefusalKind.NOT_ALLOWED
    assert "completed" in str(outcome) and "cancel" in str(outcome)
    with pytest.raises(TransitionRefused) as raised:
        decide_or_raise(make_task(S.COMPLETED), _req(Action.CANCEL))
    assert not isinstance(raised.value, LeaseLost)


def test_a_fenced_refusal_raises_lease_lost() -> None:
    with pytest.raises(LeaseLost):
        decide_or_raise(make_task(S.EXECUTING), _req(Action.COMPLETE, lock_token=OTHER_TOKEN))


def test_not_due_refusals_wait_for_their_time() -> None:
    future = LATER + timedelta(minutes=5)
    pending = make_task(S.PENDING, run_after=future)
    retrying = make_task(S.RETRYING, run_after=future)
    executing = make_task(S.EXECUTING, lease_expires_at=future)
    for task, action in (
        (pending, Action.ADMIT),
        (retrying, Action.RETRY_DUE),
        (executing, Action.LEASE_EXPIRED),
    ):
        early = decide(task, _req(action))
        assert isinstance(early, Refusal) and early.kind is RefusalKind.NOT_DUE
        on_time = decide(task, Request(action, future, actor="scheduler"))
        assert isinstance(on_time, Transition), on_time


def test_requeue_resets_retry_count_and_clears_the_error() -> None:
    task = make_task(S.DEAD_LETTER, retry_count=3, error="boom", run_after=START)
    outcome = decide(task, _req(Action.REQUEUE))
    assert isinstance(outcome, Transition)
    after = outcome.apply(task)
    assert after.retry_count == 0 and after.error is None and after.run_after is None


def test_requeue_keeps_the_assignee_and_agent_unless_given_a_new_assignee() -> None:
    dead = make_task(S.DEAD_LETTER, retry_count=3).evolve(agent="coder")
    kept = decide(dead, _req(Action.REQUEUE))
    assert isinstance(kept, Transition)
    assert "assignee" not in kept.changes and "agent" not in kept.changes
    assert kept.data == {"previous_retry_count": 3}
    after = kept.apply(dead)
    assert (after.assignee, after.agent) == ("coder", "coder")


@pytest.mark.parametrize("state", [S.DEAD_LETTER, S.MANUAL_REVIEW])
@pytest.mark.parametrize("agent", ["bob", None])
def test_requeue_to_a_new_assignee_writes_it_with_the_agent_routed_for_it(
    state: TaskState, agent: str | None
) -> None:
    """The new assignee and the agent routing chose for it (None: none, the old agent cleared)
    are set in the same transition, and its event records both."""
    dead = make_task(state, retry_count=2).evolve(agent="coder")
    outcome = decide(dead, _req(Action.REQUEUE, assignee="bob", agent=agent, reason="coder is out"))
    assert isinstance(outcome, Transition)
    assert (outcome.from_state, outcome.to_state) == (state, S.QUEUED)
    assert outcome.changes["assignee"] == "bob" and outcome.changes["agent"] == agent
    assert outcome.changes["retry_count"] == 0
    assert outcome.reason == "coder is out" and outcome.actor == "ops-person"
    routed = {"agent": agent} if agent is not None else {}
    assert outcome.data == {
        "previous_retry_count": 2,
        "assignee": "bob",
        "previous_assignee": "coder",
        **routed,
    }
    after = outcome.apply(dead)
    assert (after.state, after.assignee, after.agent) == (S.QUEUED, "bob", agent)


def test_requeue_to_a_new_assignee_is_refused_where_a_requeue_is() -> None:
    for state in (S.PENDING, S.EXECUTING, S.COMPLETED, S.ARCHIVED):
        refused = decide(make_task(state), _req(Action.REQUEUE, assignee="bob", agent="bob"))
        assert isinstance(refused, Refusal) and refused.kind is RefusalKind.NOT_ALLOWED


def test_retryable_failure_sets_run_after_to_now_plus_backoff() -> None:
    task = make_task(S.EXECUTING, retry_count=1)
    outcome = decide(task, _req(Action.FAIL, lock_token=HOLDER_TOKEN, error="timeout"))
    assert isinstance(outcome, Transition)
    after = outcome.apply(task)
    assert after.state is S.RETRYING and after.retry_count == 2
    assert after.run_after == LATER + timedelta(seconds=4)  # 2 ** 2, no jitter at spread 0.5
    assert after.error == "timeout" and after.lock_token is None


def test_p0_task_never_gets_more_than_three_retries() -> None:
    task = make_task(S.EXECUTING, priority=0, max_retries=5, retry_count=3)
    outcome = decide(task, _req(Action.FAIL, lock_token=HOLDER_TOKEN))
    assert isinstance(outcome, Transition) and outcome.to_state is S.DEAD_LETTER


def test_preemption_and_release_are_not_retries() -> None:
    for action in (Action.PREEMPT, Action.RELEASE):
        task = make_task(S.EXECUTING, retry_count=1)
        outcome = decide(task, _req(action, lock_token=HOLDER_TOKEN))
        assert isinstance(outcome, Transition)
        after = outcome.apply(task)
        assert after.state is S.QUEUED and after.retry_count == 1 and after.lock_token is None


def test_claim_sets_a_fresh_lease_capped_by_the_attempt_timeout() -> None:
    task = make_task(S.QUEUED, timeout_secs=10)
    request = _req(Action.CLAIM, new_lock_token=NEW_TOKEN, worker=WORKER, lease_ttl_secs=30.0)
    outcome = decide(task, request)
    assert isinstance(outcome, Transition)
    after = outcome.apply(task)
    assert after.lock_token == NEW_TOKEN and after.assigned_to == WORKER
    assert after.locked_at == LATER and after.heartbeat_at == LATER
    assert after.lease_expires_at == LATER + timedelta(seconds=10)


def test_live_states_are_exactly_the_non_terminal_ones() -> None:
    assert set(LIVE_STATES) | set(TERMINAL_STATES) == set(TaskState)
    assert not set(LIVE_STATES) & set(TERMINAL_STATES)
    assert {S.COMPLETED, S.FAILED, S.CANCELLED, S.ARCHIVED} == TERMINAL_STATES


def test_a_missing_token_never_matches_even_a_lease_without_one() -> None:
    task = make_task(S.EXECUTING, lock_token=None)
    for action in (Action.COMPLETE, Action.FAIL, Action.RELEASE, Action.PREEMPT, Action.WAIT_TOOL):
        outcome = decide(task, _req(action))
        assert isinstance(outcome, Refusal) and outcome.kind is RefusalKind.FENCED
