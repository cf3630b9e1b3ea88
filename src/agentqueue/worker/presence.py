"""A worker's presence: its slots, busy and free, kept in the database with a heartbeat of its
own, so ``/metrics`` on any process shows every worker's load; removed when the worker stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..domain.errors import AgentQueueError
from ..supervise import Outage

log = logging.getLogger("agentqueue.worker")


class Presence:
    """Writes ``record(busy)`` every ``interval_secs`` until stopped; a failed write is logged
    once per outage (as every loop of the worker logs one) and tried again at the next beat:
    the row is only a gauge."""

    def __init__(
        self,
        record: Callable[[int], Awaitable[None]],
        busy: Callable[[], int],
        interval_secs: float,
    ) -> None:
        self._record = record
        self._busy = busy
        self.interval_secs = interval_secs
        self._outage = Outage(log)

    async def beat(self) -> None:
        """Record the slots once."""
        try:
            await self._record(self._busy())
        except AgentQueueError as exc:
            self._outage.failed(exc, "recording the worker's slots", next_in=self.interval_secs)
        else:
            self._outage.ok("worker slots")

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            await self.beat()
            await asyncio.sleep(self.interval_secs)
