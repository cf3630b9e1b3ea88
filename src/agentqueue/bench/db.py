"""Database set-up for the benchmarks: the PostgreSQL database, a fresh state for every run,
preloading tasks, and the few reads the public API has no call for (the driver calls are in
store/admin.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..service.execution import Outcome, OutcomeKind
from ..store.admin import drop_database, ensure_database, execute, truncate_tables
from .common import Backend, BenchContext, rate

PRELOAD_CHUNK = 10_000


async def reset_postgres(url: str) -> None:
    """Migrate, then empty every agentqueue table."""
    queue = AsyncQueue(url)
    try:
        await queue.open()
    finally:
        await queue.close()
    await truncate_tables(url)


async def fresh_postgres(url: str) -> None:
    """The PostgreSQL database of ``url`` created anew and migrated, like the peers get theirs:
    no statistics left from an earlier analyzed run."""
    await drop_database(url)
    await ensure_database(url)
    await reset_postgres(url)


async def fresh_url(ctx: BenchContext, backend: Backend, label: str) -> str:
    """A database in its initial state: PostgreSQL emptied, or a new SQLite file."""
    if backend == "postgresql":
        await fresh_postgres(ctx.pg_url)
        return ctx.pg_url
    url = ctx.sqlite_url(label)
    queue = AsyncQueue(url)
    try:
        await queue.open()
    finally:
        await queue.close()
    return url


async def analyze(url: str) -> None:
    """ANALYZE on PostgreSQL (as autovacuum would after a bulk load); nothing on SQLite."""
    if url.startswith(("postgresql://", "postgres://")):
        await execute(url, "ANALYZE")


def specs(n: int, task_type: str) -> list[dict[str, Any]]:
    """``n`` minimal task specs."""
    return [{"title": "bench", "task_type": task_type} for _ in range(n)]


async def preload(
    queue: AsyncQueue, n: int, task_type: str, bar: Any = None, chunk: int = PRELOAD_CHUNK
) -> float:
    """Submit ``n`` tasks with submit_many, ``chunk`` per call; return the rate (tasks/s)."""
    started = time.perf_counter()
    done = 0
    while done < n:
        size = min(chunk, n - done)
        await queue.submit_many(specs(size, task_type))
        done += size
        if bar is not None:
            bar.update(size)
    return rate(n, time.perf_counter() - started)


async def complete_some(queue: AsyncQueue, n: int, worker: str, batch: int = 500) -> int:
    """Claim and complete up to ``n`` admitted tasks through the public API, ``batch`` at a
    time (admitting as many first); how many were completed."""
    done = 0
    while done < n:
        await queue.admit(min(batch, n - done))
        tasks = await queue.claim(min(batch, n - done), worker)
        if not tasks:
            break
        await queue.finish(
            [
                Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t)
                for t in tasks
                if t.lock_token is not None
            ]
        )
        done += len(tasks)
    return done


async def count(queue: AsyncQueue, state: TaskState) -> int:
    """How many tasks are in ``state``."""
    return (await queue.stats()).by_state.get(state, 0)


async def wait_for_count(
    queue: AsyncQueue, state: TaskState, n: int, within: float, every: float = 0.05
) -> float:
    """Wait until ``n`` tasks are in ``state``; return when that was seen (perf_counter).
    TimeoutError after ``within`` seconds."""
    deadline = time.perf_counter() + within
    while True:
        have = await count(queue, state)
        if have >= n:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {have} of {n} tasks {state.value} after {within:.0f}s")
        await asyncio.sleep(every)
