"""The steps the scheduler runs each tick, in order: take back lapsed leases (R6) and tool calls
that timed out (R9), move retries
whose backoff elapsed back to pending (R7), settle dependencies (R13), admit pending work to the
queue (R4, R12). Each step with nothing to do costs one cheap read, shared by all (work_hints).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from ..domain.models import Task
from ..domain.states import Action, Request, attempt_timed_out, bulk_event
from ..service.audit import anchor as anchor_audit
from ..service.records import ADMITTER, decide_and_apply
from ..service.runtime import Runtime
from ..service.schedules import fire_due_schedules
from ..service.tools import time_out_tool_calls
from ..store.base import AdmitParams
from .admission import HandOver, admit_limited
from .dependencies import advance_dependencies
from .retention import compact_metrics, purge_expired_dead_letters

ACTOR = ADMITTER


async def reclaim_lapsed(rt: Runtime, limit: int = 500) -> list[Task]:
    """Take back executing tasks whose lease ran out: retrying with backoff, or dead_letter.

    One whose attempt ran past its timeout (its worker never reported) is put to its pipeline's
    ``on_timeout`` first, in the same transaction, as a timeout the worker reports is: a mail
    whose reply was sent is completed, not run again."""
    now = rt.clock.now()
    policy = rt.settings.retry.policy()
    async with rt.store.transaction() as tx:
        due = await tx.lock_lapsed(limit, now)
        verdicts = {
            task.id: await rt.pipelines.on_timeout(task, tx)
            for task in due
            if attempt_timed_out(task, now)
        }

        def request(task: Task) -> Request:
            verdict = verdicts.get(task.id)
            if verdict is not None and verdict.completes:
                return Request(
                    Action.COMPLETE,
                    now,
                    actor=ACTOR,
                    reason=verdict.reason,
                    lock_token=task.lock_token,
                    result=verdict.result,
                )
            error = verdict.refused if verdict is not None else None
            return Request(
                Action.LEASE_EXPIRED,
                now,
                actor=ACTOR,
                error=error,
                backoff=policy,
                spread=rt.spread(),
            )

        written, _ = await decide_and_apply(tx, due, request)
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


async def admit(rt: Runtime, limit: int = 1000, hand_over: HandOver | None = None) -> list[UUID]:
    """Admit up to ``limit`` pending tasks to queued, best first; return their ids in order.

    Under caps or rate limits, admission counts and plans (scheduler.admission), and
    ``hand_over`` claims in its transaction. Otherwise it is ordering only, and ADMIT, one of
    the domain's set-wise actions (BULK_ACTIONS), takes one statement for the batch.
    """
    if rt.settings.admission_limited:
        return await admit_limited(rt, limit, hand_over)
    now = rt.clock.now()
    # The store tells workers (one notice for the batch) that work was queued.
    return await rt.store.admit(
        AdmitParams(
            limit,
            now,
            rt.settings.queue.aging_interval_secs,
            bulk_event(Action.ADMIT, now, ACTOR),
            sorted(await rt.paused_types()),
        )
    )


@dataclass(frozen=True)
class TickReport:
    """How many tasks each step moved."""

    reclaimed: int
    retried: int
    admitted: int
    more: bool = False
    """Admission stopped at its batch limit: more pending work may be ready now."""
    released: int = 0
    """Tasks whose dependencies all completed."""
    cancelled: int = 0
    """Tasks cancelled because a dependency failed, was cancelled or dead-lettered."""


ADMIT_BATCH = 2000
"""The most one admission pass admits: twice a worker's default slots for async handlers, so
that a pass admits ahead of what one worker holds (a routed drain, six agents configured and
1000 slots: 1.04x and 1.05x the rate of passes of 1000 in two sittings, 4000 no better)."""


async def tick(
    rt: Runtime,
    *,
    admit_first: bool = False,
    on_admitted: Callable[[], None] | None = None,
    hand_over: HandOver | None = None,
) -> TickReport:
    """One pass of every step, in order; a step with nothing to do (one cheap read tells) opens
    no write transaction. ``admit_first`` (a pass woken by news of pending work) admits before
    anything else, so the new work waits for no other step; ``on_admitted`` is called as soon as
    an admission has committed (a worker's claimer, in the same process, need not wait for the
    rest of the pass nor for the notice); ``hand_over`` claims for that worker inside an
    admission under limits, and then tells its executors itself (only those of the agents the
    admission routed to: the others would claim nothing), so ``on_admitted`` is not called."""
    handed_over = hand_over is not None and rt.settings.admission_limited
    woken = None if handed_over else on_admitted
    admitted = await admit(rt, ADMIT_BATCH, hand_over) if admit_first else []
    if hand_over is not None and admit_first:
        # The attempts the admission's claims started take the event loop first: the rest of
        # the pass (the claimer's wake-up, the next reads) is not on their dispatch path.
        await asyncio.sleep(0)
    if admitted and woken is not None:
        woken()
    if len(admitted) == ADMIT_BATCH:
        return TickReport(0, 0, len(admitted), True)
    hints = await rt.work_hints()
    reclaimed = await reclaim_lapsed(rt) if hints.lapsed else []
    if hints.tool_timeouts:
        reclaimed += await time_out_tool_calls(rt)
    retried = await promote_due_retries(rt) if hints.due else []
    deps = await advance_dependencies(rt) if hints.held else None
    released = deps.released if deps else 0
    if (hints.admissible and not admit_first) or retried or released:
        later = await admit(rt, ADMIT_BATCH, hand_over)
        if later and woken is not None:
            woken()
        admitted += later
    return TickReport(
        len(reclaimed),
        len(retried),
        len(admitted),
        len(admitted) == ADMIT_BATCH,
        released=released,
        cancelled=deps.cancelled if deps else 0,
    )


async def fire_due_slots(rt: Runtime) -> int:
    """The cron step: :func:`fire_due_schedules` once the earliest slot of any schedule has come,
    by the work hints of the last tick (read by the pass beside this step, or here if none was
    read that recently); the tasks it submitted. An idle scheduler with no slot due sends no read
    of its own; a slot fires within two ticks of its time (a schedule added since the hints were
    read is in the next tick's)."""
    hints = await rt.work_hints(rt.settings.scheduler.tick_secs)
    if hints.next_schedule_at is None or hints.next_schedule_at > rt.clock.now():
        return 0
    return await fire_due_schedules(rt)


PERIODIC_STEPS: list[tuple[Callable[[Runtime], Awaitable[object]], float | None]] = [
    (fire_due_slots, None),
    (purge_expired_dead_letters, 60.0),
    (anchor_audit, 60.0),
    (compact_metrics, 600.0),
]
"""Steps the leader runs on a timer rather than on every wake-up (nothing waits on them by the
millisecond), each with its interval in seconds (None: every ``tick_secs``): cron and retention
(counted in days, so once a minute is plenty), and the audit anchors (R24: what is not yet
anchored, a minute's events at most, is what someone with the database could still remove
unseen), and the metrics rollup's folding of rows left by closed connections (every ten
minutes: they only cost scrapes a few rows each). Deliveries (alerts among them) are sent by the
deliverer every worker, ``serve`` and scheduler process runs (agentqueue.delivery)."""
