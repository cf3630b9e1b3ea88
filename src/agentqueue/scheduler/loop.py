"""The scheduler loop: compete for the leadership, and while leading, run the steps at once on
every wake-up (news of pending work) and at least every ``tick_secs``.

It runs on its own (``agentqueue scheduler``) or inside a worker or ``serve``, which feeds it
their wake-ups. Followers only try to take the lease, every ``renew_secs``.

While the database is away, passes fail: that is said once (per kind of pass) and the passes go
on at their usual pace until it is back. A loop of its own (listener, periodic steps) that dies of
an unexpected error ends :meth:`Scheduler.run` with LoopFailed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..service.runtime import Runtime
from ..store.base import CHANNEL_PENDING
from ..supervise import Outage, Supervisor, cancel_requested
from ..wakeups import follow, wait_event
from .admission import HandOver
from .leader import Leadership
from .steps import tick

log = logging.getLogger("agentqueue.scheduler")

PeriodicStep = tuple[Callable[[Runtime], Awaitable[object]], float | None]
"""A step and its interval in seconds (None: every ``tick_secs``)."""


class Scheduler:
    """One scheduler: a candidate for the leadership that runs the steps while it leads."""

    def __init__(
        self,
        rt: Runtime,
        holder: str,
        *,
        on_admitted: Callable[[], None] | None = None,
        hand_over: HandOver | None = None,
        listen: bool = True,
        min_gap_secs: float = 0.05,
        periodic: Sequence[PeriodicStep] = (),
    ) -> None:
        self.rt = rt
        self.leadership = Leadership(rt, holder)
        self.wake = asyncio.Event()
        """Set it to run the steps now (a worker sets it on news of pending work)."""
        self._look_first = False
        """The wake-up was :meth:`look`'s alone: the pass reads the work hints first."""
        self.on_admitted = on_admitted
        self.hand_over = hand_over
        """Claims for the worker this scheduler runs in, inside an admission (see tick)."""
        self.listen = listen
        self.min_gap_secs = min_gap_secs
        self.periodic = list(periodic)
        self._last_run: dict[int, float] = {}
        self._pass_outage = Outage(log)
        self._periodic_outage = Outage(log)

    def look(self) -> None:
        """Run the steps now, reading the work hints before admitting: a wake-up that is no
        news of pending work (a worker's claims ran dry, which says only that the queue is
        empty). The pass admits if the hints find pending work due, as any pass does; with
        none it sends no admission. News that comes before the pass (``wake``) makes it admit
        first again."""
        if not self.wake.is_set():
            self._look_first = True
        self.wake.set()

    def news(self) -> None:
        """Run the steps now, admitting first: news of pending work."""
        self._look_first = False
        self.wake.set()

    @property
    def leading(self) -> bool:
        """Whether this scheduler leads now."""
        return self.leadership.leading()

    async def run(self) -> None:
        """Run until cancelled; hand the leadership back on the way out."""
        jobs = Supervisor(log, on_failure=self.wake.set)
        if self.listen:
            jobs.start(self._listen(), "agentqueue-scheduler-listen")
        # Cron, retention and alerts run beside the steps, so a slow alert endpoint never holds
        # up admission.
        jobs.start(self._periodic_loop(), "agentqueue-scheduler-periodic")
        settings = self.rt.settings.scheduler
        push = self.rt.store.push_notifications
        try:
            woken = False
            while jobs.failure is None:
                if cancel_requested():
                    raise asyncio.CancelledError  # a cancel a timeout swallowed (Python 3.11)
                more = False
                if await self.leadership.hold():  # store errors are logged there
                    # Without push notifications a wake-up is any commit, not news of pending
                    # work: look (one read) before admitting.
                    more = await self._pass(admit_first=woken and push)
                if more:
                    woken = True  # admission was cut at its batch size: go on at once
                    continue
                if not push:
                    # Without push notifications every commit is a wake-up: space the passes.
                    await asyncio.sleep(self.min_gap_secs)
                wait = settings.tick_secs if self.leading else settings.renew_secs
                woken = await wait_event(self.wake, wait)
                self.wake.clear()
                if self._look_first:
                    self._look_first = False
                    woken = False  # only a look: the hints first (Scheduler.look)
        finally:
            await jobs.close()
            await asyncio.shield(self.leadership.resign())
        jobs.check()

    async def _pass(self, admit_first: bool = False) -> bool:
        try:
            report = await tick(
                self.rt,
                admit_first=admit_first,
                on_admitted=self.on_admitted,
                hand_over=self.hand_over,
            )
        except StoreUnavailable as exc:
            self._pass_outage.failed(exc, "scheduler passes", self._pace())
            return False
        except AgentQueueError as exc:
            log.warning("scheduler step failed: %s", exc)
            return False
        self._pass_outage.ok("scheduler passes")
        return report.more

    def _pace(self) -> float:
        settings = self.rt.settings.scheduler
        return settings.tick_secs if self.leading else settings.renew_secs

    async def _periodic_loop(self) -> None:
        while True:
            if self.leading:
                await self.run_periodic()
            await asyncio.sleep(self.rt.settings.scheduler.tick_secs)

    async def run_periodic(self) -> None:
        """Run each periodic step whose interval has passed; a failing one is logged."""
        loop = asyncio.get_running_loop()
        ran = failed = False
        for index, (step, every) in enumerate(self.periodic):
            last = self._last_run.get(index)
            interval = every if every is not None else self.rt.settings.scheduler.tick_secs
            if last is not None and loop.time() - last < interval:
                continue
            self._last_run[index] = loop.time()
            name = getattr(step, "__name__", str(step))
            ran = True
            try:
                await step(self.rt)
            except StoreUnavailable as exc:
                failed = True
                self._periodic_outage.failed(
                    exc, f"periodic steps ({name})", self.rt.settings.scheduler.tick_secs
                )
            except AgentQueueError as exc:
                log.warning("scheduler step %s failed: %s", name, exc)
        if ran and not failed:
            # Only a round in which every step got through says the database is back (a step
            # with nothing to do may not have asked it).
            self._periodic_outage.ok("periodic steps")

    async def _listen(self) -> None:
        """Wake on news of pending work (a standalone scheduler's own listener)."""
        await follow(self.rt.store, (CHANNEL_PENDING,), lambda _notice: self.news(), "scheduler")
