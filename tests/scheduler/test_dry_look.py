"""A worker's claims that run dry wake its scheduler to look, not to admit at once.

Without admission limits every task that can run is admitted as it is submitted, so a claim
that comes back short says only that the queue is empty. The pass it wakes reads the work hints
first and admits only what they find due (a delayed task whose time has come); with nothing
pending it sends no admission at all. News of pending work still makes a pass admit first (on
PostgreSQL; on SQLite, whose notices say only that something changed, every pass looks first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from scheduler_helpers import OpenQueue

from agentqueue import ManualClock, Task, TaskState
from agentqueue.scheduler.loop import Scheduler
from agentqueue.service.runtime import Runtime

WITHIN = 30.0
"""Seconds a step may take on a loaded machine (a generous bound, not a speed)."""


class Steps:
    """The store's admission and work-hints reads, in the order the scheduler made them (the
    real store's own methods, recorded as they are called); ``returned`` has an event for
    each, set as a call returns."""

    def __init__(self, rt: Runtime) -> None:
        self.calls: list[str] = []
        self.returned = {name: asyncio.Event() for name in ("admit", "work_hints")}
        self._rt = rt
        for name in self.returned:
            self._record(name)

    def _record(self, name: str) -> None:
        real: Callable[..., Awaitable[Any]] = getattr(self._rt.store, name)

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            try:
                return await real(*args, **kwargs)
            finally:
                self.returned[name].set()

        setattr(self._rt.store, name, recorded)

    async def next_pass(self, wake: Callable[[], None], last: str = "work_hints") -> list[str]:
        """The calls of the pass ``wake`` starts, until its call ``last`` has returned."""
        start = len(self.calls)
        self.returned[last].clear()
        wake()
        await asyncio.wait_for(self.returned[last].wait(), WITHIN)
        return self.calls[start:]


async def test_a_look_reads_the_hints_first_and_admits_only_what_is_due(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(scheduler={"tick_secs": 60})  # no timed pass in between
    rt = await queue.runtime()
    steps = Steps(rt)
    scheduler = Scheduler(rt, "s1", listen=False)
    running = asyncio.create_task(scheduler.run())
    try:
        # Its first pass, as leader.
        await asyncio.wait_for(steps.returned["work_hints"].wait(), WITHIN)
        assert scheduler.leading
        # Nothing pending: a look reads the hints and admits nothing; news admits first where
        # the store pushes its notices (on SQLite any commit is a wake-up: every pass looks).
        assert await steps.next_pass(scheduler.look) == ["work_hints"]
        first = ["admit", "work_hints"] if rt.store.push_notifications else ["work_hints"]
        assert (await steps.next_pass(scheduler.news))[:2] == first
        # A task delayed a minute waits in pending; once its time has come, a look admits it.
        made = await queue.submit(
            title="later", task_type="t", run_after=clock.now() + timedelta(minutes=1)
        )
        assert made.task.state is TaskState.PENDING
        clock.advance(minutes=2)
        assert await steps.next_pass(scheduler.look, "admit") == ["work_hints", "admit"]
        assert (await queue.get(made.task.id)).state is TaskState.QUEUED
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


@pytest.mark.parametrize("limited", [False, True], ids=["no limits", "a global cap"])
async def test_a_workers_dry_claims_look_without_limits_and_are_news_under_them(
    open_queue: OpenQueue, limited: bool
) -> None:
    """The worker's claimer, its claims come back short, wakes the worker's scheduler: to look
    without admission limits, as news under them (the planner's cases: an agent or a cap may
    have left tasks pending that the emptied slots can now take)."""
    queue = await open_queue(**({"admission": {"max_active": 10}} if limited else {}))

    @queue.handler("t")
    async def run(task: Task, ctx: Any) -> None:
        return None

    worker = queue.worker(run_scheduler=True)
    scheduler = worker.scheduler = Scheduler(await queue.runtime(), "w", listen=False)
    worker.claimer.on_dry()
    assert scheduler.wake.is_set()
    assert scheduler._look_first is not limited
