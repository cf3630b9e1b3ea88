"""Turning decided transitions into writes: each change advances the task's audit chain."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from ..domain.alerts import ALERT_KIND
from ..domain.audit import GENESIS, chained_event
from ..domain.deliveries import Delivery, deliveries_for
from ..domain.errors import Conflict
from ..domain.models import Event, Task
from ..domain.states import (
    Action,
    Refusal,
    Request,
    TaskState,
    Transition,
    creation,
    decide,
    decide_or_raise,
)
from ..pipelines import Hold
from ..store import Change, NewTask, Tx
from ..store.base import (
    CHANNEL_OUTBOX,
    CHANNEL_PENDING,
    CHANNEL_QUEUED,
    CHANNEL_REVOKED,
    CHANNEL_TOOLS,
)
from .runtime import Runtime

alert_log = logging.getLogger("agentqueue.alerts")


def _event(task: Task, transition: Transition, seq: int, prev_hash: str) -> Event:
    return chained_event(
        task,
        seq,
        prev_hash,
        transition.at,
        transition.from_state,
        transition.to_state,
        transition.action.value,
        transition.actor,
        transition.reason,
        dict(transition.data),
    )


def stamp(task: Task, transition: Transition) -> Change:
    """The write for ``transition`` on ``task``: the columns it sets, the guard, and the
    chained event."""
    seq = task.event_seq + 1
    event = _event(task, transition, seq, task.last_hash)
    columns = {
        **transition.changes,
        "state": transition.to_state,
        "updated_at": transition.at,
        "event_seq": seq,
        "last_hash": event.hash,
    }
    return Change(task.evolve(**columns), task.state, task.event_seq, event, columns)


def new_record(
    task: Task, actor: str, admit_as: str | None = None, hold: Hold | None = None
) -> NewTask:
    """A new task (state pending) with its creation event, the first link of its chain; then
    either its block (pending -> blocked) when its pipeline holds it (``hold``: dependencies,
    or a guardrail asking for approval), or, when ``admit_as`` names the admitting actor, its
    admission (pending -> queued)."""
    transition = creation(task, actor)
    event = _event(task, transition, 1, GENESIS)
    created = task.evolve(event_seq=1, last_hash=event.hash)
    if hold is not None:
        request = block_request(hold, task.created_at)
    elif admit_as is not None:
        request = Request(Action.ADMIT, task.created_at, actor=admit_as)
    else:
        return NewTask(created, (event,))
    second = stamp(created, decide_or_raise(created, request))
    return NewTask(second.task, (event, second.event))


def block_request(hold: Hold, now: datetime) -> Request:
    """The scheduler's BLOCK for what a pipeline said holds a task."""
    return Request(
        Action.BLOCK, now, actor=ADMITTER, reason=hold.reason, hold=hold.hold, rule=hold.rule
    )


async def apply_decisions(
    tx: Tx,
    tasks: Sequence[Task],
    request_for: Callable[[Task], Request],
) -> tuple[list[Task], dict[UUID, Refusal], list[UUID]]:
    """Decide ``request_for(task)`` on each task and write every accepted change whose guard
    holds. Returns the tasks as written, the refusals, and the ids whose guard failed (the row
    moved on since ``task`` was read: decide again on a fresh read)."""
    changes: list[Change] = []
    refusals: dict[UUID, Refusal] = {}
    for task in tasks:
        outcome = decide(task, request_for(task))
        if isinstance(outcome, Refusal):
            refusals[task.id] = outcome
        else:
            changes.append(stamp(task, outcome))
    written = await tx.apply(changes)
    applied = [c for c in changes if c.task.id in written]
    await announce(tx, applied)
    await store_deliveries(tx, applied)
    stale = [c.task.id for c in changes if c.task.id not in written]
    return [c.task for c in applied], refusals, stale


async def decide_and_apply(
    tx: Tx,
    tasks: Sequence[Task],
    request_for: Callable[[Task], Request],
) -> tuple[list[Task], dict[UUID, Refusal]]:
    """Like :func:`apply_decisions` for tasks locked in ``tx``: a guard that fails there means a
    concurrent writer broke the locking rules, so the transaction is abandoned with Conflict
    rather than written half."""
    written, refusals, stale = await apply_decisions(tx, tasks, request_for)
    if stale:
        raise Conflict(f"tasks changed underneath a locked write: {', '.join(map(str, stale))}")
    return written, refusals


ADMITTER = "scheduler"
"""The actor of every step the scheduler takes."""

LEADERSHIP = "scheduler"
"""The leader lease the scheduler holds (one leader at a time)."""


async def retry_due(
    rt: Runtime, action: Action, lock: Callable[[Tx, datetime], Awaitable[list[Task]]]
) -> list[Task]:
    """Decide ``action`` as the scheduler on each task ``lock`` finds due now (locked in one
    transaction) under the retry policy in force: each goes back with a backoff, or to
    dead_letter when no retries are left. Returns the tasks as written."""
    now = rt.clock.now()
    policy = rt.settings.retry.policy()
    async with rt.store.transaction() as tx:
        due = await lock(tx, now)
        written, _ = await decide_and_apply(
            tx,
            due,
            # The jitter is drawn task by task, so tasks due together spread apart.
            lambda _task: Request(action, now, actor=ADMITTER, backoff=policy, spread=rt.spread()),
        )
    return written


async def store_deliveries(tx: Tx, changes: Sequence[Change]) -> None:
    """Every delivery these changes call for (domain.deliveries: a P0 task's dead-letter alert
    (R8), a task end's callback (R17) and its reply on the GitHub issue it came from), stored in
    the outbox in this same transaction, so none is lost; the outbox keeps one per (kind, task,
    audit position), so a change written again raises none twice. Every decided change is
    written through :func:`apply_decisions`, so this sees every path into an end; the set-wise
    completion writes only tasks that call for none (``needs_delivery``). Deliverers are woken
    at commit when something new was stored."""
    items: list[Delivery] = []
    for change in changes:
        for delivery in deliveries_for(change.task, change.event):
            if delivery.kind == ALERT_KIND:
                _log_alert(change.task, delivery.body)
            items.append(delivery)
    if items and await tx.enqueue_outbox(items):
        await tx.notify(CHANNEL_OUTBOX)


def _log_alert(task: Task, body: Mapping[str, Any]) -> None:
    # Names the task, its type and tenant and the (masked) error: never the payload. An alert
    # row has no URL: the webhook configured when it is sent, so a token rotated in the meantime
    # is used, and no secret is copied into the database.
    alert_log.error(
        "P0 task %s (type %s, tenant %s) entered dead_letter: %s",
        task.id,
        task.task_type,
        task.tenant,
        body["error"],
    )


REVOKING = frozenset({Action.CANCEL, Action.LEASE_EXPIRED})
IDS_PER_NOTICE = 200  # NOTIFY payloads stop at 8,000 bytes


async def announce(tx: Tx, changes: Sequence[Change]) -> None:
    """At most one notice per channel per batch: work became pending or queued, or the leases of
    executing tasks were revoked (their executors must stop them)."""
    states = {c.task.state for c in changes}
    if TaskState.PENDING in states:
        # A P0 task says so: under a global cap alone it waits in pending for a claim, and a
        # busy worker may preempt for it.
        urgent = any(c.task.state is TaskState.PENDING and c.task.priority == 0 for c in changes)
        await tx.notify(CHANNEL_PENDING, "p0" if urgent else "")
    if TaskState.QUEUED in states:
        urgent = any(c.task.state is TaskState.QUEUED and c.task.priority == 0 for c in changes)
        await tx.notify(CHANNEL_QUEUED, "p0" if urgent else "")
    if TaskState.WAITING_TOOL in states:
        await tx.notify(CHANNEL_TOOLS)
    revoked = [
        str(c.task.id)
        for c in changes
        if c.expected_state is TaskState.EXECUTING and c.event.action in REVOKING
    ]
    for start in range(0, len(revoked), IDS_PER_NOTICE):
        await tx.notify(CHANNEL_REVOKED, ",".join(revoked[start : start + IDS_PER_NOTICE]))
