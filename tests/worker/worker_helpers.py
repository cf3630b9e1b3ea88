"""Helpers shared by the worker tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from agentqueue import AsyncQueue, TaskState


def executions(record_file: Path) -> list[tuple[str, ...]]:
    """(task id, pid, what) for every line the test handlers and agents wrote."""
    if not record_file.exists():
        return []
    return [tuple(line.split()) for line in record_file.read_text().splitlines()]


async def wait_for(
    queue: AsyncQueue,
    condition: Callable[[dict[TaskState, int]], bool],
    within: float = 30.0,
    what: str = "condition",
) -> dict[TaskState, int]:
    """Poll stats until ``condition`` holds."""
    deadline = time.monotonic() + within
    while True:
        counts = (await queue.stats()).by_state
        if condition(counts):
            return counts
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {counts}")
        await asyncio.sleep(0.1)


def ended(counts: dict[TaskState, int], n: int) -> bool:
    """All ``n`` tasks are in terminal states."""
    return sum(v for s, v in counts.items() if s.terminal) == n
