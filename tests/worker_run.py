"""Run a worker in this process until given tasks have ended: what tests that watch one task's
attempt from the inside (its handler's context, its spans, the process's collector) share."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from agentqueue import AsyncQueue

ENDED_WITHIN_SECS = 30.0


async def run_until_ended(queue: AsyncQueue, ids: Sequence[UUID], **worker: Any) -> None:
    """Start ``queue.worker(**worker)``, wait (up to ENDED_WITHIN_SECS) until every task of
    ``ids`` is in a terminal state, then stop it and wait for it to finish. The callers assert
    the states they expect."""
    runner = queue.worker(**worker)
    running = asyncio.create_task(runner.run())
    try:
        deadline = asyncio.get_running_loop().time() + ENDED_WITHIN_SECS
        while asyncio.get_running_loop().time() < deadline:
            if all([(await queue.get(i)).state.terminal for i in ids]):
                break
            await asyncio.sleep(0.05)
    finally:
        runner.stop()
        await running
