"""Fixtures of the scheduler tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from scheduler_helpers import OpenQueue

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings


@pytest.fixture
async def open_queue(db_url: str, clock: ManualClock) -> AsyncIterator[OpenQueue]:
    """Open queues on the test database (on the manual clock) with the given settings."""
    opened: list[AsyncQueue] = []

    async def make(**settings: Any) -> AsyncQueue:
        queue = AsyncQueue(db_url, clock=clock, settings=Settings(**settings), actor="tester")
        await queue.open()
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        await queue.close()
