"""What executors do (R5): claim tasks, heartbeat their leases, and report outcomes.

Every write after the claim names the lock_token; the state machine refuses it (LeaseLost) once
the lease no longer holds, so two executors never both finish one task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID

from ..domain.errors import InvalidInput
from ..domain.models import LogRecord, Task
from ..domain.states import Action, Refusal, RefusalKind, Request, TaskState
from ..ids import new_lock_token
from ..store import Lease
from .records import decide_and_apply
from .runtime import Runtime


async def claim(
    rt: Runtime, n: int, worker: str, task_types: Sequence[str] | None = None
) -> list[Task]:
    """Move up to ``n`` queued tasks to executing for ``worker``, each with a fresh lock_token.

    Tasks come in priority order (P0 lane, aged priority, then FIFO); tasks other claimers hold
    are skipped, never waited for.
    """
    if n < 1:
        raise InvalidInput("must be at least 1", "n")
    if not worker:
        raise InvalidInput("must name the worker", "worker")
    now = rt.clock.now()
    settings = rt.settings.queue
    async with rt.store.transaction() as tx:
        candidates = await tx.lock_claimable(n, task_types, now, settings.aging_interval_secs)
        claimed, _ = await decide_and_apply(
            tx,
            candidates,
            lambda task: Request(
                Action.CLAIM,
                now,
                actor=worker,
                new_lock_token=new_lock_token(),
                worker=worker,
                lease_ttl_secs=settings.lease_ttl_secs,
                deadline_grace_secs=settings.deadline_grace_secs,
            ),
        )
    return claimed


@dataclass(frozen=True)
class HeartbeatReply:
    """Which leases still hold, and for the lost ones, the state their task is in now."""

    held: frozenset[UUID]
    lost: dict[UUID, TaskState | None]


async def heartbeat(rt: Runtime, leases: Sequence[Lease]) -> HeartbeatReply:
    """Extend the given leases. A lease that no longer holds is reported lost, with the state
    of its task (``cancelled`` tells the executor to stop at once)."""
    now = rt.clock.now()
    settings = rt.settings.queue
    held = await rt.store.heartbeat(
        leases, now, settings.lease_ttl_secs, settings.deadline_grace_secs
    )
    lost_ids = [lease.task_id for lease in leases if lease.task_id not in held]
    lost: dict[UUID, TaskState | None] = dict.fromkeys(lost_ids)
    if lost_ids:
        for task in await rt.store.get_tasks(lost_ids):
            lost[task.id] = task.state
    return HeartbeatReply(frozenset(held), lost)


class OutcomeKind(StrEnum):
    """How an attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    RELEASED = "released"
    PREEMPTED = "preempted"


_ACTIONS = {
    OutcomeKind.COMPLETED: Action.COMPLETE,
    OutcomeKind.FAILED: Action.FAIL,
    OutcomeKind.RELEASED: Action.RELEASE,
    OutcomeKind.PREEMPTED: Action.PREEMPT,
}


@dataclass(frozen=True)
class Outcome:
    """An executor's report on one attempt."""

    task_id: UUID
    lock_token: UUID
    kind: OutcomeKind
    result: Any = None
    error: str | None = None
    retryable: bool = True
    reason: str = ""


async def finish(
    rt: Runtime, outcomes: Sequence[Outcome], actor: str, logs: Sequence[LogRecord] = ()
) -> dict[UUID, Task | Refusal]:
    """Record many outcomes, and the captured output of attempts, in one transaction; each
    task gets its new image or a refusal."""
    if not outcomes:
        if logs:
            async with rt.store.transaction() as tx:
                await tx.insert_logs(logs)
        return {}
    by_id = {o.task_id: o for o in outcomes}
    if len(by_id) != len(outcomes):
        raise InvalidInput("reports the same task twice", "outcomes")
    now = rt.clock.now()
    policy = rt.settings.retry.policy()
    async with rt.store.transaction() as tx:
        tasks = await tx.lock(list(by_id))

        def request(task: Task) -> Request:
            o = by_id[task.id]
            return Request(
                _ACTIONS[o.kind],
                now,
                actor=actor,
                reason=o.reason,
                lock_token=o.lock_token,
                result=o.result,
                error=o.error,
                retryable=o.retryable,
                backoff=policy,
                spread=rt.spread(),
            )

        written, refusals = await decide_and_apply(tx, tasks, request)
        # Output belongs to the attempt whatever became of the outcome, so it is kept even when
        # the outcome was refused (a lease lost just before the report).
        await tx.insert_logs(logs)
    out: dict[UUID, Task | Refusal] = {t.id: t for t in written}
    out.update(refusals)
    for task_id in by_id:
        if task_id not in out:
            kind = _ACTIONS[by_id[task_id].kind]
            out[task_id] = Refusal(task_id, kind, None, RefusalKind.FENCED, "no such task")
    return out


async def finish_one(rt: Runtime, outcome: Outcome, actor: str) -> Task:
    """Record one outcome; raise LeaseLost (or TransitionRefused) if it is refused."""
    result = (await finish(rt, [outcome], actor))[outcome.task_id]
    if isinstance(result, Refusal):
        raise result.error()
    return result
