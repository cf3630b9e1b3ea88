"""Notice routing: the listener's notices turned into the worker's wake-ups.

A revocation stops the attempts it names; news of stored deliveries wakes the deliverer; news
of tool calls wakes the tool runner; news of queued work wakes the claimer (a queued P0 task may
also preempt; news that names the agents the work was routed to wakes only their executors), and
so does news of pending work when claims admit (a global cap alone); anything
else wakes the embedded scheduler. A bare "something changed" notice (SQLite) is checked with
one read before claiming (and before delivering). The claimer's slow poll covers a listener
that drops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..domain.errors import AgentQueueError
from ..store.base import (
    CHANNEL_CHANGED,
    CHANNEL_OUTBOX,
    CHANNEL_PENDING,
    CHANNEL_QUEUED,
    CHANNEL_REVOKED,
    CHANNEL_TOOLS,
    CHANNELS,
    Notice,
    Store,
    WorkHints,
    routed_to,
)
from ..supervise import Supervisor
from ..wakeups import follow

log = logging.getLogger("agentqueue.worker")


@dataclass
class Wakeups:
    """Where notices lead."""

    revoke: Callable[[str], None]
    tools: Callable[[], None]
    work: Callable[[], None]
    p0: Callable[[], None]
    scheduler: Callable[[], None]
    deliveries: Callable[[], None] = lambda: None
    routed: Callable[[frozenset[str | None]], None] | None = None
    """News of queued work routed to these agents (None: to no agent) only; without it, such
    news is ``work`` (everyone's)."""


class NoticeRouter:
    """Follows the store's notices and calls the matching wake-ups."""

    def __init__(
        self,
        store: Store,
        work_hints: Callable[[], Awaitable[WorkHints]],
        wake: Wakeups,
        jobs: Supervisor,
        pending_is_work: bool = False,
    ) -> None:
        self.store = store
        self.work_hints = work_hints
        self.wake = wake
        self.jobs = jobs
        self.pending_is_work = pending_is_work
        """Claims admit (Settings.claims_admit): news of pending work wakes the claimer too."""
        self._probe: asyncio.Task[None] | None = None
        self._probe_again = False

    async def run(self) -> None:
        """Follow notices until cancelled (reconnecting when the listener drops)."""
        await follow(self.store, CHANNELS, self.route, "worker")

    def route(self, notice: Notice) -> None:
        """Act on one notice."""
        channel = notice.channel
        if channel == CHANNEL_REVOKED:
            self.wake.revoke(notice.payload)
            return
        if channel == CHANNEL_OUTBOX:
            self.wake.deliveries()
            return
        if channel == CHANNEL_CHANGED:
            self.wake.deliveries()  # the deliverer looks (one read) before leasing
        if channel in (CHANNEL_TOOLS, CHANNEL_CHANGED):
            self.wake.tools()
        if channel == CHANNEL_TOOLS:
            return
        if channel == CHANNEL_QUEUED and notice.payload == "p0":
            self.wake.p0()
        if channel == CHANNEL_PENDING and self.pending_is_work and notice.payload in ("", "p0"):
            # New pending work, which the claims admit: only the claimer's news (a claim that
            # comes back short wakes the scheduler, for the planner's cases); a P0 task among
            # it may preempt, as a queued one does.
            if notice.payload == "p0":
                self.wake.p0()
            self.wake.work()
            return
        if channel != CHANNEL_QUEUED:
            self.wake.scheduler()
        if channel == CHANNEL_CHANGED:
            # Some commit, maybe only a lease renewal: claim only if one read finds work queued.
            self._probe_again = True
            if self._probe is None or self._probe.done():
                self._probe = self.jobs.start(self._probe_queued(), "agentqueue-probe")
        elif channel == CHANNEL_QUEUED:
            agents = routed_to(notice.payload)
            if agents is not None and self.wake.routed is not None:
                self.wake.routed(agents)  # only their executors can claim it
            else:
                self.wake.work()
        elif channel != CHANNEL_PENDING or self.pending_is_work:
            self.wake.work()

    async def _probe_queued(self) -> None:
        # A commit seen while a read is under way may be after its snapshot: read again.
        while self._probe_again:
            self._probe_again = False
            try:
                hints = await self.work_hints()
            except AgentQueueError:
                return  # the claimer's poll looks again (and reports an outage)
            pending_work = self.pending_is_work and hints.admissible
            if hints.queued or pending_work:
                self.wake.work()
            if hints.p0_queued or pending_work:
                self.wake.p0()  # the preemptor reads which P0 tasks wait, if a slot could go
