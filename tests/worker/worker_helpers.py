"""Helpers shared by the worker tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from agentqueue import AsyncQueue, Task, TaskState
from fast_config import fast_config

FAST_CONFIG = fast_config()
"""Short leases and fast retries (see fast_config), grace 5 s."""


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


async def settled(queue: AsyncQueue, task_id: UUID, within: float = 60.0) -> Task:
    """The task once it has ended: a terminal state, or dead-lettered."""
    deadline = time.monotonic() + within
    while True:
        task = await queue.get(task_id)
        if task.terminal or task.state is TaskState.DEAD_LETTER:
            return task
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} still {task.state.value} after {within}s")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def worker_running(queue: AsyncQueue, **options: Any) -> AsyncIterator[None]:
    """``queue`` (open) running a worker in this process (``run_worker`` with ``options``) for
    the block; then the worker stopped (within 30 s) and the queue closed, whatever happens."""
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run_worker(stop=stop, **options))
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(running, 30)
        finally:
            await queue.close()
