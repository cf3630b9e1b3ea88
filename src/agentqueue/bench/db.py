"""Database set-up for the benchmarks: the PostgreSQL database, a fresh state for every run,
preloading tasks, and the few reads the public API has no call for."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from ..domain.states import TaskState
from ..queue import AsyncQueue
from .common import Backend, BenchContext, rate

PRELOAD_CHUNK = 10_000


def dbname(url: str) -> str:
    """The database name of a PostgreSQL URL."""
    name = urlsplit(url).path.lstrip("/")
    return name or "postgres"


def with_dbname(url: str, name: str) -> str:
    """The same PostgreSQL URL naming another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def ensure_database(url: str) -> None:
    """Create the database of ``url`` if it does not exist."""
    admin_url = with_dbname(url, "postgres")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname(url),))
        if await cur.fetchone() is None:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname(url))))


async def drop_database(url: str) -> None:
    """Drop the database of ``url`` if it exists."""
    admin_url = with_dbname(url, "postgres")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname(url)))
        )


async def server_version(url: str) -> str:
    """``SHOW server_version`` of the PostgreSQL server."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SHOW server_version")
        row = await cur.fetchone()
        return str(row[0]) if row else "?"


async def reset_postgres(url: str) -> None:
    """Migrate, then empty every agentqueue table (aq_events is append-only by trigger, so with
    ``session_replication_role = replica``)."""
    queue = AsyncQueue(url)
    try:
        await queue.open()
    finally:
        await queue.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'aq\\_%' AND tablename <> 'aq_schema_version'"
        )
        tables = [str(row[0]) for row in await cur.fetchall()]
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in tables)
            )
        )


async def fresh_url(ctx: BenchContext, backend: Backend, label: str) -> str:
    """A database in its initial state: PostgreSQL emptied, or a new SQLite file."""
    if backend == "postgresql":
        # A new database, like the peers get: no statistics left from an earlier analyzed run.
        await drop_database(ctx.pg_url)
        await ensure_database(ctx.pg_url)
        await reset_postgres(ctx.pg_url)
        return ctx.pg_url
    url = ctx.sqlite_url(label)
    queue = AsyncQueue(url)
    try:
        await queue.open()
    finally:
        await queue.close()
    return url


async def execute(url: str, statement: str) -> None:
    """Run one statement outside a transaction (ANALYZE, VACUUM)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(statement.encode())


async def analyze(url: str) -> None:
    """ANALYZE on PostgreSQL (as autovacuum would after a bulk load); nothing on SQLite."""
    if url.startswith(("postgresql://", "postgres://")):
        await execute(url, "ANALYZE")


async def scalar(url: str, query: str) -> Any:
    """The one value a PostgreSQL query returns."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(query.encode())
        row = await cur.fetchone()
        return None if row is None else row[0]


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
