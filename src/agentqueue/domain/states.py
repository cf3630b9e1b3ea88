"""The state machine of SPEC section 2, and the one function that decides every change.

``TRANSITIONS`` is the table of allowed (from, to) edges. ``decide(task, request)`` returns the
:class:`Transition` an action leads to from the task's current state, or a :class:`Refusal`
saying why not. Stores only apply transitions decided here, guarded by the expected state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from .audit import data_text, hash_tail
from .errors import LeaseLost, TransitionRefused
from .models import Task
from .retry import BackoffPolicy, retries_left, retry_limit
from .task_state import LIVE_STATES as LIVE_STATES
from .task_state import TERMINAL_STATES as TERMINAL_STATES
from .task_state import TaskState as TaskState

S = TaskState

TRANSITIONS: Mapping[tuple[TaskState | None, TaskState], str] = {
    (None, S.PENDING): "submitted",
    (S.PENDING, S.BLOCKED): "a guardrail asks for approval, or dependencies are unfinished",
    (S.BLOCKED, S.PENDING): "approved by someone allowed to; last dependency completed",
    (S.PENDING, S.QUEUED): "admitted by the scheduler",
    (S.QUEUED, S.EXECUTING): "claimed by an executor",
    (S.EXECUTING, S.WAITING_TOOL): "the agent asked for an external tool",
    (S.WAITING_TOOL, S.QUEUED): "the tool result arrived, or the tool timed out with retries left",
    (S.WAITING_TOOL, S.DEAD_LETTER): "the tool timed out and no retries are left",
    (S.EXECUTING, S.COMPLETED): "success",
    (S.EXECUTING, S.RETRYING): "retryable error or attempt timeout, retries left",
    (S.RETRYING, S.PENDING): "backoff elapsed",
    (S.EXECUTING, S.FAILED): "non-retryable error",
    (S.EXECUTING, S.DEAD_LETTER): "retries exhausted",
    (S.RETRYING, S.DEAD_LETTER): "retries exhausted",
    (S.EXECUTING, S.QUEUED): "preempted or released at graceful shutdown; not a retry",
    (S.DEAD_LETTER, S.MANUAL_REVIEW): "a person takes it",
    (S.DEAD_LETTER, S.QUEUED): "requeued by a person",
    (S.MANUAL_REVIEW, S.QUEUED): "requeued by a person",
    (S.DEAD_LETTER, S.ARCHIVED): "confirmed discarded",
    (S.MANUAL_REVIEW, S.ARCHIVED): "confirmed discarded",
    **{(s, S.CANCELLED): "cancelled by a person or the API" for s in S if s in LIVE_STATES},
}
"""Every allowed change (SPEC section 2). Anything else is refused."""


class Action(StrEnum):
    """What someone (a person, the scheduler, an executor) asks to happen to a task."""

    SUBMIT = "submit"
    BLOCK = "block"
    UNBLOCK = "unblock"
    APPROVE = "approve"
    REJECT = "reject"
    ADMIT = "admit"
    CLAIM = "claim"
    WAIT_TOOL = "wait_tool"
    TOOL_RESULT = "tool_result"
    TOOL_TIMEOUT = "tool_timeout"
    COMPLETE = "complete"
    FAIL = "fail"
    LEASE_EXPIRED = "lease_expired"
    RETRY_DUE = "retry_due"
    EXHAUST = "exhaust"
    RELEASE = "release"
    PREEMPT = "preempt"
    REVIEW = "review"
    REQUEUE = "requeue"
    ARCHIVE = "archive"
    CANCEL = "cancel"
    REPRIORITIZE = "reprioritize"


IN_PLACE_ACTIONS = frozenset({Action.REPRIORITIZE})
"""Actions that change a task without moving it: the task stays in its state (not an edge of
TRANSITIONS), and the change is audited like any other."""


BULK_ACTIONS: Mapping[Action, tuple[TaskState, TaskState]] = {
    Action.ADMIT: (TaskState.PENDING, TaskState.QUEUED),
    Action.CLAIM: (TaskState.QUEUED, TaskState.EXECUTING),
    Action.COMPLETE: (TaskState.EXECUTING, TaskState.COMPLETED),
}
"""The hot actions a store may apply to a whole batch in one statement instead of row by row.

Their rules are simple enough to state set-wise (see ``_admit``, ``_claim``, ``_complete``), and
each store's statement must write exactly what :func:`decide` would for every row it touches,
audit event and hash included; tests hold every store to that. Everything else goes through
``decide`` one task at a time.
"""


@dataclass(frozen=True)
class BulkEvent:
    """The audit event a set-wise action writes for every row: the same but for the task and
    its position, so its hash tail (see domain.audit.hash_tail) is computed once."""

    from_state: TaskState
    to_state: TaskState
    action: Action
    actor: str
    reason: str
    data_text: str
    tail: str


def bulk_event(action: Action, at: datetime, actor: str, agent: str | None = None) -> BulkEvent:
    """The event ``action`` (one of BULK_ACTIONS) writes at ``at``, as decide() would: a claim
    records its worker (the actor), an admission the agent routing chose (if any), a
    completion no data."""
    from_state, to_state = BULK_ACTIONS[action]
    data: dict[str, Any] = {}
    if action is Action.CLAIM:
        data = {"worker": actor}
    elif action is Action.ADMIT and agent is not None:
        data = {"agent": agent}
    text = data_text(data)
    tail = hash_tail(at, from_state.value, to_state.value, action.value, actor, "", text)
    return BulkEvent(from_state, to_state, action, actor, "", text, tail)


TOOL_WAITING = "waiting"
TOOL_RUNNING = "running"  # a tool runner has taken it
TOOL_DONE = "done"
TOOL_TIMED_OUT = "timed_out"
AWAITED_TOOL_STATES = frozenset({TOOL_WAITING, TOOL_RUNNING})
"""A tool call's states: a result is taken only for a call still awaited."""
DEFAULT_TOOL_TIMEOUT_SECS = 600.0

HOLD_DEPENDENCIES = "dependencies"
HOLD_APPROVAL = "approval"
HOLDS = frozenset({HOLD_DEPENDENCIES, HOLD_APPROVAL})
"""What may hold a blocked task: unfinished dependencies (R13) or a guardrail's approval (R15)."""

FENCED_ACTIONS = frozenset(
    {Action.WAIT_TOOL, Action.COMPLETE, Action.FAIL, Action.RELEASE, Action.PREEMPT}
)
"""Executor writes: they must name the lock_token that holds the task."""


class RefusalKind(StrEnum):
    """Why a change was refused."""

    NOT_ALLOWED = "not_allowed"  # the table has no such edge from the current state
    FENCED = "fenced"  # the lock_token no longer holds the lease
    NOT_DUE = "not_due"  # a time condition (run_after, backoff, lease) has not passed


@dataclass(frozen=True)
class Request:
    """An action with what it needs. ``now`` is the injected clock's reading."""

    action: Action
    now: datetime
    actor: str = "system"
    reason: str = ""
    lock_token: UUID | None = None
    new_lock_token: UUID | None = None
    worker: str | None = None
    lease_ttl_secs: float = 30.0
    deadline_grace_secs: float = 0.0
    result: Any = None
    error: str | None = None
    retryable: bool = True
    timed_out: bool = False
    """FAIL: the attempt ran out of time (recorded as ``"timeout": true`` in the event)."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    spread: float = 0.5
    tool_call: Mapping[str, Any] | None = None
    """WAIT_TOOL: the call to wait for (``id``, ``name``, ``args``, ``timeout_secs``)."""
    tool_call_id: str | None = None
    """TOOL_RESULT, TOOL_TIMEOUT: the call answered or timed out (None: the one awaited)."""
    checkpoint: Any = None
    checkpointed: bool = False
    """WAIT_TOOL, PREEMPT, RELEASE, FAIL: keep ``checkpoint`` with the task."""
    hold: str | None = None
    """BLOCK: what holds the task (see HOLDS). UNBLOCK: the hold being released; a task held
    for anything else is refused (a dependency step never releases an approval hold)."""
    rule: str | None = None
    """BLOCK: the guardrail that asked for approval (recorded in the event)."""
    priority: int | None = None
    """REPRIORITIZE: the task's new priority (0-9)."""
    agent: str | None = None
    """ADMIT, and REQUEUE with an assignee: the agent routing chose (None: any executor serving
    the task's type)."""
    assignee: str | None = None
    """REQUEUE: the task's new assignee (None: it keeps its assignee and its agent)."""


@dataclass(frozen=True)
class Transition:
    """A decided change: the edge taken, the fields it sets and what the audit event records."""

    task_id: UUID
    action: Action
    from_state: TaskState | None
    to_state: TaskState
    changes: Mapping[str, Any]
    actor: str
    reason: str
    at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, task: Task) -> Task:
        """The task as it is after this change (bookkeeping of the audit chain excluded)."""
        return task.evolve(state=self.to_state, updated_at=self.at, **self.changes)


@dataclass(frozen=True)
class Refusal:
    """A change the state machine will not make, and why."""

    task_id: UUID
    action: Action
    state: TaskState | None  # None when the task does not exist
    kind: RefusalKind
    message: str

    def __str__(self) -> str:
        return f"cannot {self.action.value} task {self.task_id}: {self.message}"

    def error(self) -> TransitionRefused:
        """The exception to raise for this refusal."""
        if self.kind is RefusalKind.FENCED:
            return LeaseLost(self)
        return TransitionRefused(self)


_LEASE_CLEARED: Mapping[str, Any] = {
    "lock_token": None,
    "locked_at": None,
    "heartbeat_at": None,
    "lease_expires_at": None,
    "assigned_to": None,
}


def allowed(from_state: TaskState | None, to_state: TaskState) -> bool:
    """Whether the table has this edge."""
    return (from_state, to_state) in TRANSITIONS


def decide(task: Task, request: Request) -> Transition | Refusal:
    """Decide what ``request`` does to ``task``: the transition to apply, or a refusal.

    Pure: reads nothing but its arguments. Every transition returned is an edge of TRANSITIONS.
    """
    handler = _DECIDERS.get(request.action)
    if handler is None:
        return _refuse(task, request, RefusalKind.NOT_ALLOWED, "not an action on existing tasks")
    if request.action in FENCED_ACTIONS:
        fenced = _check_lease(task, request)
        if fenced is not None:
            return fenced
    outcome = handler(task, request)
    if isinstance(outcome, Transition) and not (
        allowed(outcome.from_state, outcome.to_state)
        or (request.action in IN_PLACE_ACTIONS and outcome.from_state is outcome.to_state)
    ):
        # A decider bug must never reach a store.
        raise AssertionError(f"decided a forbidden edge {outcome.from_state} -> {outcome.to_state}")
    return outcome


def decide_or_raise(task: Task, request: Request) -> Transition:
    """Like :func:`decide`, raising TransitionRefused (or LeaseLost) instead of returning one."""
    outcome = decide(task, request)
    if isinstance(outcome, Refusal):
        raise outcome.error()
    return outcome


def creation(task: Task, actor: str, reason: str = "submitted") -> Transition:
    """The first change of every task: (new) -> pending."""
    return Transition(
        task_id=task.id,
        action=Action.SUBMIT,
        from_state=None,
        to_state=TaskState.PENDING,
        changes={},
        actor=actor,
        reason=reason,
        at=task.created_at,
        data={"priority": task.priority, "task_type": task.task_type, "source": task.source},
    )


# --- deciders, one per action -------------------------------------------------------------


def _refuse(task: Task, request: Request, kind: RefusalKind, message: str) -> Refusal:
    return Refusal(task.id, request.action, task.state, kind, message)


def _not_from(task: Task, request: Request) -> Refusal:
    return _refuse(
        task,
        request,
        RefusalKind.NOT_ALLOWED,
        f"a task that is {task.state.value} cannot be {_PAST[request.action]}",
    )


def _check_lease(task: Task, request: Request) -> Refusal | None:
    if task.state is not TaskState.EXECUTING or request.lock_token is None:
        held = "" if task.state is TaskState.EXECUTING else f"; the task is {task.state.value}"
        return _refuse(task, request, RefusalKind.FENCED, f"the lease is no longer held{held}")
    if task.lock_token != request.lock_token:
        return _refuse(
            task, request, RefusalKind.FENCED, "the lease is no longer held; another claim owns it"
        )
    return None


def _edge(
    task: Task,
    request: Request,
    to_state: TaskState,
    changes: Mapping[str, Any] | None = None,
    reason: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> Transition:
    return Transition(
        task_id=task.id,
        action=request.action,
        from_state=task.state,
        to_state=to_state,
        changes=dict(changes or {}),
        actor=request.actor,
        reason=reason if reason is not None else request.reason,
        at=request.now,
        data=dict(data or {}),
    )


def _retry_or_dead_letter(
    task: Task,
    request: Request,
    error: str,
    base_changes: Mapping[str, Any],
    timed_out: bool = False,
) -> Transition:
    """Retry with backoff if retries are left (``retrying``), else ``dead_letter``. An attempt
    that ran out of time says so in its event (``"timeout": true``): metrics count it apart."""
    marked: dict[str, Any] = {"timeout": True} if timed_out else {}
    if retries_left(task.retry_count, task.max_retries, task.priority):
        attempt = task.retry_count + 1
        delay = request.backoff.delay(attempt, request.spread)
        run_after = request.now + timedelta(seconds=delay)
        target = TaskState.RETRYING if task.state is TaskState.EXECUTING else TaskState.QUEUED
        return _edge(
            task,
            request,
            target,
            {
                **base_changes,
                "retry_count": attempt,
                "run_after": run_after if target is TaskState.RETRYING else task.run_after,
                "error": error,
                "state_reason": error,
            },
            reason=request.reason or error,
            data={"error": error, "retry": attempt, "backoff_secs": round(delay, 3), **marked},
        )
    limit = retry_limit(task.max_retries, task.priority)
    why = f"retries exhausted ({task.retry_count} of {limit}): {error}"
    return _edge(
        task,
        request,
        TaskState.DEAD_LETTER,
        {**base_changes, "error": error, "state_reason": why},
        reason=request.reason or why,
        data={"error": error, "retry_count": task.retry_count, **marked},
    )


def _block(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.PENDING:
        return _not_from(task, request)
    # A block that names no hold waits for a person: nothing automatic ever releases it.
    hold = request.hold or HOLD_APPROVAL
    if hold not in HOLDS:
        raise ValueError(f"a block's hold must be one of {sorted(HOLDS)}")
    data = {"hold": hold, **({"rule": request.rule} if request.rule else {})}
    return _edge(
        task,
        request,
        TaskState.BLOCKED,
        {"state_reason": request.reason or "blocked", "hold": hold},
        data=data,
    )


def _unblock(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.BLOCKED:
        return _not_from(task, request)
    if request.hold is not None and task.hold != request.hold:
        # The seed's Bug-B: a task blocked for one reason must never be released by the step
        # that handles another (a guardrail hold is not a dependency hold).
        held = task.hold or "an unknown reason"
        return _refuse(
            task,
            request,
            RefusalKind.NOT_ALLOWED,
            f"the task is held for {held}, not for {request.hold}",
        )
    return _edge(
        task, request, TaskState.PENDING, {"state_reason": None, "hold": None, "eligible_at":
                                           max(task.eligible_at, request.now)},
    )  # fmt: skip


def _approval_hold(task: Task, request: Request) -> Refusal | None:
    if task.state is not TaskState.BLOCKED:
        return _not_from(task, request)
    if task.hold != HOLD_APPROVAL:
        held = task.hold or "an unknown reason"
        return _refuse(
            task, request, RefusalKind.NOT_ALLOWED, f"the task is held for {held}, not for approval"
        )
    return None


def _approve(task: Task, request: Request) -> Transition | Refusal:
    refused = _approval_hold(task, request)
    if refused is not None:
        return refused
    return _edge(
        task,
        request,
        TaskState.PENDING,
        {
            "state_reason": None,
            "hold": None,
            "approved_by": request.actor,
            "eligible_at": max(task.eligible_at, request.now),
        },
        data={"approved_by": request.actor},
    )


def _reject(task: Task, request: Request) -> Transition | Refusal:
    refused = _approval_hold(task, request)
    if refused is not None:
        return refused
    why = f"rejected by {request.actor}" + (f": {request.reason}" if request.reason else "")
    return _edge(
        task,
        request,
        TaskState.CANCELLED,
        {"hold": None, "finished_at": request.now, "state_reason": why},
        data={"rejected_by": request.actor},
    )


def _admit(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.PENDING:
        return _not_from(task, request)
    if task.run_after is not None and task.run_after > request.now:
        return _refuse(task, request, RefusalKind.NOT_DUE, f"not before {task.run_after}")
    return _edge(
        task,
        request,
        TaskState.QUEUED,
        {"state_reason": None, "agent": request.agent},
        data={"agent": request.agent} if request.agent is not None else {},
    )


def _claim(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.QUEUED:
        return _not_from(task, request)
    if request.new_lock_token is None or not request.worker:
        raise ValueError("a claim needs a new lock_token and a worker")
    # The lease never outlives the attempt's deadline by more than the grace, which leaves the
    # executor time to stop a timed-out attempt and report it before the scheduler takes it.
    ttl = min(request.lease_ttl_secs, task.timeout_secs + request.deadline_grace_secs)
    return _edge(
        task,
        request,
        TaskState.EXECUTING,
        {
            "lock_token": request.new_lock_token,
            "locked_at": request.now,
            "heartbeat_at": request.now,
            "lease_expires_at": request.now + timedelta(seconds=ttl),
            "assigned_to": request.worker,
            "started_at": request.now,
            "state_reason": None,
        },
        data={"worker": request.worker},
    )


def _kept_checkpoint(request: Request) -> dict[str, Any]:
    return {"checkpoint": request.checkpoint} if request.checkpointed else {}


def _wait_tool(task: Task, request: Request) -> Transition | Refusal:
    call = request.tool_call
    if call is None or not call.get("id") or not call.get("name"):
        raise ValueError("a tool wait needs a tool call with an id and a name")
    if any(c.get("id") == call["id"] for c in task.tool_calls):
        return _refuse(
            task, request, RefusalKind.NOT_ALLOWED, f"tool call {call['id']} was already made"
        )
    timeout = float(call.get("timeout_secs") or DEFAULT_TOOL_TIMEOUT_SECS)
    deadline = request.now + timedelta(seconds=timeout)
    entry = {
        "id": str(call["id"]),
        "name": str(call["name"]),
        "args": call.get("args"),
        "state": TOOL_WAITING,
        "result": None,
        "timeout_secs": timeout,
        "requested_at": request.now.isoformat(),
        "deadline_at": deadline.isoformat(),
    }
    return _edge(
        task,
        request,
        TaskState.WAITING_TOOL,
        {
            **_LEASE_CLEARED,
            **_kept_checkpoint(request),
            "tool_calls": (*task.tool_calls, entry),
            "tool_deadline_at": deadline,
            "state_reason": f"waiting for tool {entry['name']} (call {entry['id']})",
        },
        data={"tool_call": entry["id"], "tool": entry["name"]},
    )


def _awaited(task: Task, request: Request) -> tuple[int, Refusal | None]:
    """The index of the call ``request`` answers, or why it is not awaited."""
    if task.state is not TaskState.WAITING_TOOL:
        return -1, _refuse(
            task,
            request,
            RefusalKind.NOT_ALLOWED,
            f"tool call {request.tool_call_id} is not awaited: the task is {task.state.value}",
        )
    wanted = request.tool_call_id
    if wanted is None:  # the call the task awaits, whichever it is (a timeout names none)
        awaited = [c for c in task.tool_calls if c.get("state") in AWAITED_TOOL_STATES]
        wanted = str(awaited[-1].get("id")) if awaited else None
    for index, call in enumerate(task.tool_calls):
        if call.get("id") == wanted:
            if call.get("state") in AWAITED_TOOL_STATES:
                return index, None
            return index, _refuse(
                task,
                request,
                RefusalKind.NOT_ALLOWED,
                f"tool call {request.tool_call_id} is not awaited: it is {call.get('state')}",
            )
    return -1, _refuse(
        task, request, RefusalKind.NOT_ALLOWED, f"the task made no tool call {request.tool_call_id}"
    )


def _with_call(task: Task, index: int, **fields: Any) -> tuple[Any, ...]:
    calls = list(task.tool_calls)
    calls[index] = {**calls[index], **fields}
    return tuple(calls)


def _tool_result(task: Task, request: Request) -> Transition | Refusal:
    index, refused = _awaited(task, request)
    if refused is not None:
        return refused
    calls = _with_call(
        task, index, state=TOOL_DONE, result=request.result, finished_at=request.now.isoformat()
    )
    return _edge(
        task,
        request,
        TaskState.QUEUED,
        {
            "tool_calls": calls,
            "tool_deadline_at": None,
            "state_reason": None,
            "eligible_at": request.now,
        },
        data={"tool_call": request.tool_call_id},
    )


def _tool_timeout(task: Task, request: Request) -> Transition | Refusal:
    index, refused = _awaited(task, request)
    if refused is not None:
        return refused
    deadline = task.tool_deadline_at
    if deadline is not None and deadline > request.now:
        return _refuse(task, request, RefusalKind.NOT_DUE, f"the tool call runs until {deadline}")
    call = task.tool_calls[index]
    error = request.error or f"tool {call.get('name')} (call {call.get('id')}) timed out"
    calls = _with_call(task, index, state=TOOL_TIMED_OUT, finished_at=request.now.isoformat())
    return _retry_or_dead_letter(
        task,
        request,
        error,
        {"tool_calls": calls, "tool_deadline_at": None, "eligible_at": request.now},
    )


def _complete(task: Task, request: Request) -> Transition | Refusal:
    return _edge(
        task,
        request,
        TaskState.COMPLETED,
        {
            **_LEASE_CLEARED,
            "result": request.result,
            "error": None,
            "state_reason": None,
            "finished_at": request.now,
        },
    )


def _fail(task: Task, request: Request) -> Transition | Refusal:
    error = request.error or "failed"
    if request.retryable:
        return _retry_or_dead_letter(
            task,
            request,
            error,
            {**_LEASE_CLEARED, **_kept_checkpoint(request)},
            timed_out=request.timed_out,
        )
    return _edge(
        task,
        request,
        TaskState.FAILED,
        {**_LEASE_CLEARED, "error": error, "state_reason": error, "finished_at": request.now},
        reason=request.reason or error,
        data={"error": error, "retryable": False},
    )


def attempt_timed_out(task: Task, now: datetime) -> bool:
    """Whether the attempt of an executing ``task`` has run past its timeout at ``now`` (a
    lapsed lease is then a timeout, not a lost worker)."""
    deadline = (task.locked_at or now) + timedelta(seconds=task.timeout_secs)
    return now >= deadline


def _lease_expired(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.EXECUTING:
        return _not_from(task, request)
    if task.lease_expires_at is not None and task.lease_expires_at > request.now:
        return _refuse(task, request, RefusalKind.NOT_DUE, "the lease still holds")
    timed_out = attempt_timed_out(task, request.now)
    if timed_out:
        error = f"attempt timed out after {task.timeout_secs}s"
    else:
        error = f"lease lapsed: no heartbeat from {task.assigned_to} since {task.heartbeat_at}"
    return _retry_or_dead_letter(
        task, request, request.error or error, _LEASE_CLEARED, timed_out=timed_out
    )


def _retry_due(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.RETRYING:
        return _not_from(task, request)
    if task.run_after is not None and task.run_after > request.now:
        return _refuse(task, request, RefusalKind.NOT_DUE, f"backoff runs until {task.run_after}")
    return _edge(
        task, request, TaskState.PENDING, {"eligible_at": request.now, "state_reason": None}
    )


def _exhaust(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.RETRYING:
        return _not_from(task, request)
    why = request.reason or "retries exhausted"
    return _edge(task, request, TaskState.DEAD_LETTER, {"state_reason": why}, reason=why)


def _release(task: Task, request: Request) -> Transition | Refusal:
    return _edge(
        task,
        request,
        TaskState.QUEUED,
        {**_LEASE_CLEARED, **_kept_checkpoint(request), "state_reason": None},
    )


def _review(task: Task, request: Request) -> Transition | Refusal:
    if task.state is not TaskState.DEAD_LETTER:
        return _not_from(task, request)
    return _edge(
        task, request, TaskState.MANUAL_REVIEW, {"state_reason": f"taken by {request.actor}"}
    )


def _requeue(task: Task, request: Request) -> Transition | Refusal:
    if task.state not in (TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW):
        return _not_from(task, request)
    changes: dict[str, Any] = {
        "retry_count": 0,
        "run_after": None,
        "error": None,
        "state_reason": None,
        "eligible_at": request.now,
    }
    data: dict[str, Any] = {"previous_retry_count": task.retry_count}
    if request.assignee is not None:
        # The agent admission routed the task to was chosen for the old assignee: it is
        # replaced by the one routing chose for the new assignee.
        changes.update(assignee=request.assignee, agent=request.agent)
        data.update(assignee=request.assignee, previous_assignee=task.assignee)
        if request.agent is not None:
            data["agent"] = request.agent
    return _edge(task, request, TaskState.QUEUED, changes, data=data)


def _archive(task: Task, request: Request) -> Transition | Refusal:
    if task.state not in (TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW):
        return _not_from(task, request)
    return _edge(
        task,
        request,
        TaskState.ARCHIVED,
        {"finished_at": request.now, "state_reason": request.reason or None},
    )


def _cancel(task: Task, request: Request) -> Transition | Refusal:
    if task.state.terminal:
        return _not_from(task, request)
    why = request.reason or f"cancelled by {request.actor}"
    return _edge(
        task,
        request,
        TaskState.CANCELLED,
        {**_LEASE_CLEARED, "finished_at": request.now, "state_reason": why},
        reason=why,
    )


def _reprioritize(task: Task, request: Request) -> Transition | Refusal:
    # Allowed while the task is live, whatever it is doing: the priority orders admission and
    # claims, the P0 lane and preemption, and any retry or requeue still to come. A finished
    # task has nothing left for a priority to order.
    if task.state.terminal:
        return _not_from(task, request)
    new = request.priority
    if new is None or not 0 <= new <= 9:
        raise ValueError("a reprioritization needs a new priority from 0 to 9")
    if new == task.priority:
        return _refuse(
            task, request, RefusalKind.NOT_ALLOWED, f"the task already has priority {new}"
        )
    if new == 0 and not task.idempotency_key:
        # SPEC section 1: a P0 task carries an idempotency key, however it became P0.
        return _refuse(task, request, RefusalKind.NOT_ALLOWED, "a P0 task needs an idempotency key")
    why = request.reason or f"priority {task.priority} -> {new} by {request.actor}"
    return _edge(
        task,
        request,
        task.state,
        {"priority": new},
        reason=why,
        data={"priority": new, "previous_priority": task.priority},
    )


_DECIDERS = {
    Action.BLOCK: _block,
    Action.UNBLOCK: _unblock,
    Action.APPROVE: _approve,
    Action.REJECT: _reject,
    Action.ADMIT: _admit,
    Action.CLAIM: _claim,
    Action.WAIT_TOOL: _wait_tool,
    Action.TOOL_RESULT: _tool_result,
    Action.TOOL_TIMEOUT: _tool_timeout,
    Action.COMPLETE: _complete,
    Action.FAIL: _fail,
    Action.LEASE_EXPIRED: _lease_expired,
    Action.RETRY_DUE: _retry_due,
    Action.EXHAUST: _exhaust,
    Action.RELEASE: _release,
    Action.PREEMPT: _release,
    Action.REVIEW: _review,
    Action.REQUEUE: _requeue,
    Action.ARCHIVE: _archive,
    Action.CANCEL: _cancel,
    Action.REPRIORITIZE: _reprioritize,
}

_PAST = {
    Action.SUBMIT: "submitted",
    Action.BLOCK: "blocked",
    Action.UNBLOCK: "unblocked",
    Action.APPROVE: "approved (only a task waiting for approval can)",
    Action.REJECT: "rejected (only a task waiting for approval can)",
    Action.ADMIT: "admitted",
    Action.CLAIM: "claimed",
    Action.WAIT_TOOL: "moved to waiting_tool",
    Action.TOOL_RESULT: "given a tool result",
    Action.TOOL_TIMEOUT: "timed out waiting for a tool",
    Action.COMPLETE: "completed",
    Action.FAIL: "failed",
    Action.LEASE_EXPIRED: "taken back",
    Action.RETRY_DUE: "retried",
    Action.EXHAUST: "dead-lettered",
    Action.RELEASE: "released",
    Action.PREEMPT: "preempted",
    Action.REVIEW: "taken for review (only dead letters can)",
    Action.REQUEUE: "requeued (only dead letters and tasks in review can)",
    Action.ARCHIVE: "archived (only dead letters and tasks in review can)",
    Action.CANCEL: "cancelled",
    Action.REPRIORITIZE: "given another priority",
}
