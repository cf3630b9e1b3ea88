"""A worker's presence: its slots, busy and free, kept in the database with a heartbeat of its
own, so ``/metrics`` on any process shows every worker's load; removed when the worker stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..domain.errors import AgentQueueError

log = logging.getLogger("agentqueue.worker")


class Presence:
    """Writes ``record(busy)`` every ``interval_secs`` until stopped; a failed write is logged
    once per run of failures and tried again at the next beat (the row is only a gauge)."""

    def __init__(
        self,
        record: Callable[[int], Awaitable[None]],
        busy: Callable[[], int],
        interval_secs: float,
    ) -> None:
        self._record = record
        self._busy = busy
        self.interval_secs = interval_secs
        self._failing = False

    async def beat(self) -> None:
        """Record the slots once."""
        try:
            await self._record(self._busy())
        except AgentQueueError as exc:
            if not self._failing:
                log.warning("recording the worker's slots failed (tried again): %s", exc)
            self._failing = True
        else:
            self._failing = False

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            await self.beat()
            await asyncio.sleep(self.interval_secs)
