"""The lease keeper: heartbeats for the running attempts, and the guard that stops them before
their leases lapse when heartbeats keep failing.

A lease not renewed for ``lease_guard`` of ``lease_ttl_secs`` (counted from when the last
claim or heartbeat that held was sent) is about to lapse; the scheduler will then take the task
back and another worker may run it. So the attempt is stopped first, by the same path as a
revoked lease (a handler is cancelled, a command agent killed), and reports no outcome: a task
never runs twice at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from uuid import UUID

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..domain.models import Task
from ..domain.states import TaskState
from ..service.execution import HeartbeatReply
from ..supervise import Outage
from ..wakeups import wait_event
from .running import Running

log = logging.getLogger("agentqueue.worker")

Heartbeat = Callable[[list[Task]], Awaitable[HeartbeatReply]]

LEASE_GUARD = "heartbeats failed too long; stopped before the lease lapses"
"""The stop reason of an attempt the guard stops (it reports no outcome)."""


# A part of the worker: its fields are what it is given (kw-only from ``interval_secs`` on);
# it keeps identity equality and the plain object repr.
@dataclass(eq=False, repr=False)
class LeaseKeeper:
    """Renews the leases of ``running`` every ``interval_secs`` (at once on :meth:`beat`)."""

    heartbeat: Heartbeat
    running: Mapping[UUID, Running]
    _: KW_ONLY
    interval_secs: float
    lease_secs: float
    guard: float = 0.8
    pending: Callable[[], list[Task]] = field(default=lambda: [])
    """Tasks whose attempts ended but whose outcomes are not recorded yet (the database is
    away): their leases are renewed too, so that once the database is back the outcome is
    recorded rather than the task taken back and run again."""
    guarded: int = field(default=0, init=False)
    """Attempts stopped by the guard."""
    _beat_now: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _outage: Outage = field(default_factory=lambda: Outage(log), init=False)

    @property
    def guard_secs(self) -> float:
        """How long a lease may go unrenewed before its attempt is stopped."""
        return self.guard * self.lease_secs

    def beat(self) -> None:
        """Heartbeat soon (a handler asked to renew its lease)."""
        self._beat_now.set()

    def _held(self) -> list[Running]:
        return [r for r in self.running.values() if not r.control.cancel.is_set()]

    def _until_guard(self) -> float:
        """Seconds until the first held lease reaches the guard (inf with none held)."""
        held = self._held()
        if not held:
            return float("inf")
        oldest = min(r.renewed_at for r in held)
        return oldest + self.guard_secs - time.monotonic()

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        pause = self.interval_secs
        while True:
            await wait_event(self._beat_now, max(0.0, min(pause, self._until_guard())))
            self._beat_now.clear()
            self.stop_overdue()
            held = self._held()
            # A task claimed again here while its earlier outcome waits is renewed as running.
            ended = [t for t in self.pending() if t.id not in self.running]
            if not held and not ended:
                pause = self.interval_secs
                continue
            pause = await self._renew(held, ended)

    async def _renew(self, held: list[Running], ended: list[Task] | None = None) -> float:
        """One heartbeat for ``held`` (and the ``ended`` attempts' tasks whose outcomes wait);
        return the pause before the next."""
        sent = time.monotonic()
        until_guard = self._until_guard()
        what = self._what(len(held) + len(ended or ()))
        try:
            # The database may hang rather than refuse: never wait past the guard.
            async with asyncio.timeout(None if held == [] else max(0.05, until_guard)):
                reply = await self.heartbeat([r.task for r in held] + list(ended or ()))
        except TimeoutError:
            error = StoreUnavailable("no answer to a heartbeat")
            return min(self.interval_secs, self._outage.failed(error, what))
        except StoreUnavailable as exc:
            return min(self.interval_secs, self._outage.failed(exc, what))
        except AgentQueueError as exc:
            log.warning("heartbeat failed: %s", exc)
            return self.interval_secs
        self._outage.ok(what.replace("renewing", "renewed"))
        for running in held:
            if running.task.id in reply.held:
                running.renewed_at = max(running.renewed_at, sent)
        for task_id, state in reply.lost.items():
            lost = self.running.get(task_id)
            if lost is None:
                continue
            reason = (
                "cancelled"
                if state is TaskState.CANCELLED
                else f"lease lost (the task is {state.value if state else 'gone'})"
            )
            log.info("stopping task %s: %s", task_id, reason)
            lost.control.stop(reason)
        return self.interval_secs

    @staticmethod
    def _what(count: int) -> str:
        return f"renewing {count} lease{'s' if count != 1 else ''}"

    def stop_overdue(self) -> None:
        """Stop every held attempt whose lease went unrenewed past the guard."""
        now = time.monotonic()
        overdue = [r for r in self._held() if now - r.renewed_at >= self.guard_secs]
        if not overdue:
            return
        log.warning(
            "stopping %d running attempt(s) (%s): their leases were not renewed for %.1f s, "
            "lease_guard %g of the %g s lease; no outcome is recorded, the scheduler will "
            "retry them once the leases lapse",
            len(overdue),
            ", ".join(str(r.task.id) for r in overdue[:5]) + (", ..." if len(overdue) > 5 else ""),
            max(now - r.renewed_at for r in overdue),
            self.guard,
            self.lease_secs,
        )
        for running in overdue:
            running.control.stop(LEASE_GUARD)
        self.guarded += len(overdue)

    def revoke(self, payload: str) -> None:
        """Stop the attempts named in a revocation notice (comma-separated task ids)."""
        for text in payload.split(","):
            try:
                task_id = UUID(text)
            except ValueError:
                continue
            running = self.running.get(task_id)
            if running is not None:
                log.info("stopping task %s: its lease was revoked", task_id)
                running.control.stop("lease revoked (cancelled or taken back)")
