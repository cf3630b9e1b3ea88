"""Random sequences of every action, applied through decide(), keep the rules of SPEC section 2."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from task_factory import START, make_task, wait_call

from agentqueue.domain.models import Task
from agentqueue.domain.retry import BackoffPolicy, retry_limit
from agentqueue.domain.states import (
    FENCED_ACTIONS,
    HOLD_APPROVAL,
    IN_PLACE_ACTIONS,
    LIVE_STATES,
    TRANSITIONS,
    Action,
    Refusal,
    RefusalKind,
    Request,
    TaskState,
    Transition,
    decide,
)

S = TaskState

# An independent model of the table: which states each action starts from and where it may lead.
SOURCES: dict[Action, frozenset[TaskState]] = {
    Action.SUBMIT: frozenset(),
    Action.BLOCK: frozenset({S.PENDING}),
    Action.UNBLOCK: frozenset({S.BLOCKED}),
    Action.APPROVE: frozenset({S.BLOCKED}),
    Action.REJECT: frozenset({S.BLOCKED}),
    Action.ADMIT: frozenset({S.PENDING}),
    Action.CLAIM: frozenset({S.QUEUED}),
    Action.WAIT_TOOL: frozenset({S.EXECUTING}),
    Action.TOOL_RESULT: frozenset({S.WAITING_TOOL}),
    Action.TOOL_TIMEOUT: frozenset({S.WAITING_TOOL}),
    Action.COMPLETE: frozenset({S.EXECUTING}),
    Action.FAIL: frozenset({S.EXECUTING}),
    Action.LEASE_EXPIRED: frozenset({S.EXECUTING}),
    Action.RETRY_DUE: frozenset({S.RETRYING}),
    Action.EXHAUST: frozenset({S.RETRYING}),
    Action.RELEASE: frozenset({S.EXECUTING}),
    Action.PREEMPT: frozenset({S.EXECUTING}),
    Action.REVIEW: frozenset({S.DEAD_LETTER}),
    Action.REQUEUE: frozenset({S.DEAD_LETTER, S.MANUAL_REVIEW}),
    Action.ARCHIVE: frozenset({S.DEAD_LETTER, S.MANUAL_REVIEW}),
    Action.CANCEL: LIVE_STATES,
    Action.REPRIORITIZE: LIVE_STATES,
}
TARGETS: dict[Action, frozenset[TaskState]] = {
    Action.SUBMIT: frozenset(),
    Action.BLOCK: frozenset({S.BLOCKED}),
    Action.UNBLOCK: frozenset({S.PENDING}),
    Action.APPROVE: frozenset({S.PENDING}),
    Action.REJECT: frozenset({S.CANCELLED}),
    Action.ADMIT: frozenset({S.QUEUED}),
    Action.CLAIM: frozenset({S.EXECUTING}),
    Action.WAIT_TOOL: frozenset({S.WAITING_TOOL}),
    Action.TOOL_RESULT: frozenset({S.QUEUED}),
    Action.TOOL_TIMEOUT: frozenset({S.QUEUED, S.DEAD_LETTER}),
    Action.COMPLETE: frozenset({S.COMPLETED}),
    Action.FAIL: frozenset({S.RETRYING, S.DEAD_LETTER, S.FAILED}),
    Action.LEASE_EXPIRED: frozenset({S.RETRYING, S.DEAD_LETTER}),
    Action.RETRY_DUE: frozenset({S.PENDING}),
    Action.EXHAUST: frozenset({S.DEAD_LETTER}),
    Action.RELEASE: frozenset({S.QUEUED}),
    Action.PREEMPT: frozenset({S.QUEUED}),
    Action.REVIEW: frozenset({S.MANUAL_REVIEW}),
    Action.REQUEUE: frozenset({S.QUEUED}),
    Action.ARCHIVE: frozenset({S.ARCHIVED}),
    Action.CANCEL: frozenset({S.CANCELLED}),
    Action.REPRIORITIZE: LIVE_STATES,  # in place: the state it started from
}
LEASE_FIELDS = ("lock_token", "locked_at", "heartbeat_at", "lease_expires_at", "assigned_to")
TOKEN_POOL = [UUID(int=n) for n in range(1, 6)]


@dataclass(frozen=True)
class Op:
    """One random request: the action and everything it may carry."""

    action: Action
    token: str  # "current", "pool" (a random token, sometimes the current one) or "none"
    pool_token: UUID
    new_token: UUID
    retryable: bool
    advance_secs: int
    lease_ttl_secs: int
    spread: float
    actor: str
    priority: int


PARAMS = st.tuples(
    st.sampled_from(["current", "current", "pool", "none"]),
    st.sampled_from(TOKEN_POOL),
    st.sampled_from(TOKEN_POOL),
    st.booleans(),
    st.integers(min_value=0, max_value=90),
    st.integers(min_value=1, max_value=60),
    st.floats(min_value=0, max_value=1, exclude_max=True, allow_nan=False),
    st.sampled_from(["system", "scheduler", "ops-person", "worker-2"]),
    st.integers(min_value=0, max_value=9),
)

# Without a bias towards actions that apply to the current state, most runs would end within a
# few steps and never reach retries, dead letters or requeues. With these weights every edge of
# the table comes up within a few hundred runs. Cancel stays rare for the same reason.
WEIGHTS = {
    Action.ADMIT: 4,
    Action.CLAIM: 4,
    Action.FAIL: 4,
    Action.RETRY_DUE: 4,
    Action.UNBLOCK: 3,
    Action.LEASE_EXPIRED: 2,
    Action.TOOL_RESULT: 2,
    Action.TOOL_TIMEOUT: 2,
    Action.REQUEUE: 2,
}


def _on_path(state: TaskState) -> st.SearchStrategy[Action]:
    weighted: list[Action] = [
        action
        for action in Action
        if state in SOURCES[action] and action is not Action.CANCEL
        for _ in range(WEIGHTS.get(action, 1))
    ]
    return st.sampled_from(weighted or [Action.CANCEL])


ON_PATH = {state: _on_path(state) for state in TaskState}
ANY_ACTION = st.sampled_from(list(Action))


def draw_op(data: st.DataObject, task: Task) -> Op:
    """Mostly an action that applies to the task's state, sometimes any action at all."""
    on_path = data.draw(st.integers(0, 9)) < 8
    action = data.draw(ON_PATH[task.state] if on_path else ANY_ACTION)
    return Op(action, *data.draw(PARAMS))


start_tasks = st.builds(
    lambda priority, max_retries, timeout, assignee: make_task(
        S.PENDING,
        priority=priority,
        max_retries=max_retries,
        timeout_secs=timeout,
        assignee=assignee,
    ),
    priority=st.integers(min_value=0, max_value=9),
    max_retries=st.integers(min_value=0, max_value=5),
    timeout=st.integers(min_value=1, max_value=120),
    assignee=st.sampled_from([None, "coder", "mail-recipient"]),
)


def _request(task: Task, op: Op, now_offset: int) -> Request:
    token = {"current": task.lock_token, "pool": op.pool_token, "none": None}[op.token]
    return Request(
        action=op.action,
        now=START + timedelta(seconds=now_offset),
        actor=op.actor,
        lock_token=token,
        new_lock_token=op.new_token,
        worker="worker-9",
        lease_ttl_secs=op.lease_ttl_secs,
        result={"ok": True},
        error="boom",
        retryable=op.retryable,
        backoff=BackoffPolicy(),
        spread=op.spread,
        tool_call=wait_call(task),
        priority=op.priority,
    )


def _fenced_out(task: Task, request: Request) -> bool:
    return (
        task.state is not S.EXECUTING
        or request.lock_token is None
        or request.lock_token != task.lock_token
    )


def _not_due(task: Task, request: Request) -> bool:
    if request.action in (Action.ADMIT, Action.RETRY_DUE):
        return task.run_after is not None and task.run_after > request.now
    if request.action is Action.LEASE_EXPIRED:
        return task.lease_expires_at is not None and task.lease_expires_at > request.now
    if request.action is Action.TOOL_TIMEOUT:
        return task.tool_deadline_at is not None and task.tool_deadline_at > request.now
    return False


@dataclass(frozen=True)
class Step:
    """One decision of a walk: the task before, the request, the outcome and the task after."""

    before: Task
    request: Request
    outcome: Transition | Refusal
    after: Task


def walk(task: Task, steps: int, data: st.DataObject) -> Iterator[Step]:
    """Apply ``steps`` random requests to ``task`` through decide(), time moving forward."""
    offset = 0
    for _ in range(steps):
        op = draw_op(data, task)
        offset += op.advance_secs
        request = _request(task, op, offset)
        outcome = decide(task, request)
        after = outcome.apply(task) if isinstance(outcome, Transition) else task
        yield Step(task, request, outcome, after)
        task = after


STEPS = st.integers(min_value=1, max_value=50)
WALK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_every_transition_is_a_table_edge_and_anything_else_a_refusal(
    task: Task, steps: int, data: st.DataObject
) -> None:
    for step in walk(task, steps, data):
        before, request, outcome = step.before, step.request, step.outcome
        action = request.action
        if isinstance(outcome, Refusal):
            assert outcome.task_id == before.id and outcome.action is action
            assert outcome.state is before.state
            if action in FENCED_ACTIONS and _fenced_out(before, request):
                assert outcome.kind is RefusalKind.FENCED
            elif before.state not in SOURCES[action]:
                assert outcome.kind is RefusalKind.NOT_ALLOWED
            elif action in (Action.APPROVE, Action.REJECT) and before.hold != HOLD_APPROVAL:
                # Only a guardrail's hold is released (or rejected) by a person's decision.
                assert outcome.kind is RefusalKind.NOT_ALLOWED
            elif action is Action.REPRIORITIZE:
                # The same priority again, or P0 for a task without an idempotency key.
                assert request.priority == before.priority or (
                    request.priority == 0 and not before.idempotency_key
                ), outcome
                assert outcome.kind is RefusalKind.NOT_ALLOWED
            else:
                # From a state the action applies to, only a time condition may refuse it.
                assert _not_due(before, request), f"{action} refused: {outcome}"
                assert outcome.kind is RefusalKind.NOT_DUE
            continue
        assert isinstance(outcome, Transition)
        if action in IN_PLACE_ACTIONS:
            assert outcome.to_state is before.state
        else:
            assert (outcome.from_state, outcome.to_state) in TRANSITIONS
        assert outcome.from_state is before.state
        assert before.state in SOURCES[action]
        assert outcome.to_state in TARGETS[action]
        assert not _not_due(before, request)
        assert outcome.action is action
        assert outcome.at == request.now and outcome.actor == request.actor
        # The seed's Bug-A: no change of state ever touches who the task is for.
        assert "assignee" not in outcome.changes and step.after.assignee == before.assignee
        assert step.after.state is outcome.to_state


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_terminal_states_never_change_again(task: Task, steps: int, data: st.DataObject) -> None:
    for step in walk(task, steps, data):
        if step.before.state.terminal:
            assert isinstance(step.outcome, Refusal), f"{step.request.action} left a terminal"
            assert step.after == step.before


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_retry_count_never_exceeds_the_retry_limit(
    task: Task, steps: int, data: st.DataObject
) -> None:
    limit = retry_limit(task.max_retries, task.priority)
    assert limit == (min(task.max_retries, 3) if task.priority == 0 else task.max_retries)
    for step in walk(task, steps, data):
        # The limit is the current priority's (REPRIORITIZE may change it): never passed
        # except by retries made under a higher limit before the task became P0.
        assert step.after.retry_count <= limit
        limit = max(limit, retry_limit(step.after.max_retries, step.after.priority))


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_failures_retry_with_backoff_while_retries_are_left_then_dead_letter(
    task: Task, steps: int, data: st.DataObject
) -> None:
    for step in walk(task, steps, data):
        before, after, action = step.before, step.after, step.request.action
        limit = retry_limit(before.max_retries, before.priority)  # REPRIORITIZE may change it
        if not isinstance(step.outcome, Transition):
            continue
        if action is Action.FAIL and not step.request.retryable:
            assert after.state is S.FAILED and after.retry_count == before.retry_count
        elif action in (Action.FAIL, Action.LEASE_EXPIRED, Action.TOOL_TIMEOUT):
            if before.retry_count < limit:
                expected = S.RETRYING if before.state is S.EXECUTING else S.QUEUED
                assert after.state is expected
                assert after.retry_count == before.retry_count + 1
            else:
                assert after.state is S.DEAD_LETTER
                assert after.retry_count == before.retry_count
        elif action is not Action.REQUEUE:
            assert after.retry_count == before.retry_count, f"{action} changed retry_count"
        if after.state is S.RETRYING and action not in IN_PLACE_ACTIONS:  # entering it
            assert after.run_after is not None and after.run_after > step.request.now


@WALK
@given(
    task=start_tasks,
    steps=STEPS,
    data=st.data(),
    wrong=st.sampled_from([None, *TOKEN_POOL]),
    fenced=st.sampled_from(sorted(FENCED_ACTIONS)),
)
def test_fenced_actions_with_a_wrong_or_missing_token_are_refused_as_fenced(
    task: Task, steps: int, data: st.DataObject, wrong: UUID | None, fenced: Action
) -> None:
    for step in walk(task, steps, data):
        current = step.before
        if wrong is None or wrong != current.lock_token:
            probe = Request(fenced, step.request.now, lock_token=wrong, new_lock_token=wrong)
            refused = decide(current, probe)
            assert isinstance(refused, Refusal), f"{fenced} passed from {current.state}"
            assert refused.kind is RefusalKind.FENCED
        if step.request.action in FENCED_ACTIONS:
            holds = not _fenced_out(current, step.request)
            assert isinstance(step.outcome, Transition) == holds


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_lease_fields_are_cleared_whenever_a_task_leaves_executing(
    task: Task, steps: int, data: st.DataObject
) -> None:
    for step in walk(task, steps, data):
        if step.after.state is S.EXECUTING:
            if step.before.state is not S.EXECUTING:
                assert step.after.lock_token == step.request.new_lock_token
                assert step.after.assigned_to == step.request.worker
                assert step.after.lease_expires_at is not None
            continue
        for name in LEASE_FIELDS:
            assert getattr(step.after, name) is None, f"{name} set while {step.after.state}"


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_assignee_is_never_changed_by_any_transition(
    task: Task, steps: int, data: st.DataObject
) -> None:
    for step in walk(task, steps, data):
        if isinstance(step.outcome, Transition):
            assert "assignee" not in step.outcome.changes
        assert step.after.assignee == task.assignee


@WALK
@given(task=start_tasks, steps=STEPS, data=st.data())
def test_requeue_resets_retry_count(task: Task, steps: int, data: st.DataObject) -> None:
    for step in walk(task, steps, data):
        if step.request.action is Action.REQUEUE and isinstance(step.outcome, Transition):
            assert step.after.state is S.QUEUED
            assert step.after.retry_count == 0
            assert step.outcome.data["previous_retry_count"] == step.before.retry_count
