"""The steps the scheduler runs each tick: take back lapsed leases (R6), move retries whose
backoff elapsed back to pending (R7), and admit pending work to the queue (R4).

Admission here is ordering only (P0 lane, aged priority, FIFO, run_after); caps, rate limits,
fair share and dependencies join it with the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from ..domain.models import Task
from ..domain.states import Action, Request, bulk_event
from .records import decide_and_apply
from .runtime import Runtime

ACTOR = "scheduler"


async def reclaim_lapsed(rt: Runtime, limit: int = 500) -> list[Task]:
    """Take back executing tasks whose lease ran out: retrying with backoff, or dead_letter."""
    now = rt.clock.now()
    policy = rt.settings.retry.policy()
    async with rt.store.transaction() as tx:
        lapsed = await tx.lock_lapsed(limit, now)
        written, _ = await decide_and_apply(
            tx,
            lapsed,
            lambda task: Request(
                Action.LEASE_EXPIRED, now, actor=ACTOR, backoff=policy, spread=rt.spread()
            ),
        )
    return written


async def promote_due_retries(rt: Runtime, limit: int = 500) -> list[Task]:
    """Move retrying tasks whose backoff has elapsed back to pending."""
    now = rt.clock.now()
    async with rt.store.transaction() as tx:
        due = await tx.lock_due_retries(limit, now)
        written, _ = await decide_and_apply(
            tx, due, lambda task: Request(Action.RETRY_DUE, now, actor=ACTOR)
        )
    return written


async def admit(rt: Runtime, limit: int = 1000) -> list[UUID]:
    """Admit up to ``limit`` pending tasks to queued, best first; return their ids in order.

    ADMIT is one of the domain's set-wise actions (BULK_ACTIONS): one statement for the batch.
    """
    now = rt.clock.now()
    # The store tells workers (one notice for the batch) that work was queued.
    return await rt.store.admit(
        limit, now, rt.settings.queue.aging_interval_secs, bulk_event(Action.ADMIT, now, ACTOR)
    )


@dataclass(frozen=True)
class TickReport:
    """How many tasks each step moved."""

    reclaimed: int
    retried: int
    admitted: int
    more: bool = False
    """Admission stopped at its batch limit: more pending work may be ready now."""


ADMIT_BATCH = 1000


async def tick(rt: Runtime) -> TickReport:
    """One pass of every step, in order; a step with nothing to do (one cheap read tells) opens
    no write transaction."""
    hints = await rt.store.work_hints(rt.clock.now())
    reclaimed = await reclaim_lapsed(rt) if hints.lapsed else []
    retried = await promote_due_retries(rt) if hints.due else []
    admitted = await admit(rt, ADMIT_BATCH) if hints.admissible or retried else []
    return TickReport(len(reclaimed), len(retried), len(admitted), len(admitted) == ADMIT_BATCH)
