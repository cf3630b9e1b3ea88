"""Tool runs: this worker's tools answer the calls that waiting tasks made (R9).

Awaited calls are taken (leased) up to ``concurrency`` at once, on every notice that tasks
began waiting and at least every ``poll_secs``. While the database is away, taking stops and
answers already computed are kept and sent again until they are taken or refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any
from uuid import UUID

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..executors.inprocess import is_async_callable
from ..service.tools import ToolWork
from ..supervise import Outage, Supervisor
from ..wakeups import wait_event

log = logging.getLogger("agentqueue.worker")

Take = Callable[[list[str], int], Awaitable[list[ToolWork]]]
"""Take up to n awaited calls of these tools."""
Answer = Callable[[UUID, str, Any], Awaitable[object]]
"""Submit a call's result."""


# A part of the worker: its fields are what it is given (kw-only from ``concurrency`` on); it
# keeps identity equality and the plain object repr.
@dataclass(eq=False, repr=False)
class ToolRunner:
    """Runs this worker's tools for the calls waiting tasks made."""

    tools: Mapping[str, Callable[[Any], Any]]
    take: Take
    answer: Answer
    jobs: Supervisor
    _: KW_ONLY
    concurrency: int
    poll_secs: float
    calls: int = field(default=0, init=False)
    wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _running: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _outage: Outage = field(default_factory=lambda: Outage(log), init=False)
    _answer_outage: Outage = field(default_factory=lambda: Outage(log), init=False)

    def __post_init__(self) -> None:
        self.tools = dict(self.tools)  # a dict of its own, whatever mapping it was given

    @property
    def running(self) -> set[asyncio.Task[None]]:
        """Tool calls under way."""
        return self._running

    async def run(self) -> None:
        """Take and run calls until cancelled."""
        names = sorted(self.tools)
        while True:
            wait = self.poll_secs
            room = self.concurrency - len(self._running)
            if room > 0:
                try:
                    work = await self.take(names, room)
                except StoreUnavailable as exc:
                    work = []
                    wait = self._outage.failed(exc, "taking tool calls")
                except AgentQueueError as exc:
                    log.warning("taking tool calls failed: %s", exc)
                    work = []
                else:
                    self._outage.ok("taking tool calls")
                for item in work:
                    job = self.jobs.start(self._run(item), f"agentqueue-tool-{item.name}")
                    self._running.add(job)
                    job.add_done_callback(self._done)
                if work and len(work) == room:
                    continue  # there may be more
            await wait_event(self.wake, wait)
            self.wake.clear()

    def _done(self, job: asyncio.Task[None]) -> None:
        self._running.discard(job)
        self.wake.set()

    async def _run(self, work: ToolWork) -> None:
        fn = self.tools[work.name]
        self.calls += 1
        try:
            if is_async_callable(fn):
                value = await fn(work.args)
            else:
                value = await asyncio.get_running_loop().run_in_executor(None, fn, work.args)
        except Exception as exc:  # the tool's failure is the call's answer
            value = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        while True:
            try:
                await self.answer(work.task_id, work.call_id, value)
            except StoreUnavailable as exc:
                what = f"answering tool call {work.call_id} of task {work.task_id}"
                await self._answer_outage.wait(exc, what)
                continue
            except AgentQueueError as exc:  # not awaited any more (timed out, cancelled)
                log.info("result of tool call %s of task %s not taken: %s", work.call_id,
                         work.task_id, exc)  # fmt: skip
            self._answer_outage.ok()
            return
