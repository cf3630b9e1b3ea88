"""R1 on each backend: versioned migrations, applied on first use, once, even by several
processes opening a fresh database at the same moment."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import agentqueue
from agentqueue import AsyncQueue
from agentqueue.store import make_store
from agentqueue.store.migrate import (
    ALIGNED_FROM,
    DIALECTS,
    aligned_mismatch,
    available,
    latest_version,
)
from agentqueue.store.sqlite.dialect import SQLiteDialect

FreshUrls = Callable[[], str]


def _dialect(url: str) -> str:
    return "sqlite" if url.startswith("sqlite:") else "postgres"


def test_each_dialect_ships_migrations_numbered_from_one() -> None:
    for dialect in ("sqlite", "postgres"):
        versions = [m.version for m in available(dialect)]
        assert versions == list(range(1, len(versions) + 1)) and versions
        assert latest_version(dialect) == versions[-1]


def test_both_dialects_ship_the_same_numbers_from_the_aligned_version_on() -> None:
    shipped = {d: {m.version for m in available(d)} for d in DIALECTS}
    later = [{v for v in versions if v >= ALIGNED_FROM} for versions in shipped.values()]
    assert later[0] == later[1] and ALIGNED_FROM in later[0]
    assert aligned_mismatch(shipped) is None
    assert latest_version("sqlite") == latest_version("postgres")


def test_a_migration_numbered_in_one_dialect_only_is_refused() -> None:
    problem = aligned_mismatch({"sqlite": set(range(1, 9)), "postgres": set(range(1, 10))})
    assert problem is not None and "postgres: [8, 9]" in problem and "sqlite: [8]" in problem
    # Below the aligned version the dialects may differ (SQLite's 1..7 are PostgreSQL's 1..8).
    assert aligned_mismatch({"sqlite": set(range(1, 8)), "postgres": set(range(1, 8))}) is None
    assert aligned_mismatch({"sqlite": {1, 2, 8}, "postgres": set(range(1, 9))}) is None


async def test_a_sqlite_database_at_version_7_moves_on_to_the_aligned_version(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path}/seven.db"
    old = SQLiteDialect(url)
    try:
        assert await old.applied_versions() == set()
        for migration in available("sqlite")[:7]:
            assert await old.apply_migration(migration)
    finally:
        await old.close()
    async with AsyncQueue(url) as queue:  # opening migrates what is missing: the no-op 0008
        assert await queue.store.schema_version() == latest_version("sqlite")
        result = await queue.submit(title="after", task_type="docs")
        assert (await queue.get(result.task.id)).title == "after"
        assert (await queue.verify()).ok


async def test_fresh_database_is_migrated_on_first_use(fresh_db_urls: FreshUrls) -> None:
    url = fresh_db_urls()
    async with AsyncQueue(url) as queue:  # never migrated by hand
        result = await queue.submit(title="first", task_type="docs")
        assert (await queue.get(result.task.id)).title == "first"
        assert await queue.store.schema_version() == latest_version(_dialect(url))
        assert (await queue.verify()).ok


async def test_first_call_of_any_operation_migrates(fresh_db_urls: FreshUrls) -> None:
    url = fresh_db_urls()
    queue = AsyncQueue(url)  # not opened: the first read opens and migrates
    try:
        assert (await queue.stats()).total == 0
        assert await queue.store.schema_version() == latest_version(_dialect(url))
    finally:
        await queue.close()


async def test_migrate_twice_applies_nothing_the_second_time(fresh_db_urls: FreshUrls) -> None:
    url = fresh_db_urls()
    queue = AsyncQueue(url)
    try:
        await queue.migrate()
        assert await queue.store.schema_version() == latest_version(_dialect(url))
        assert await queue.migrate() == []
        assert await queue.store.schema_version() == latest_version(_dialect(url))
    finally:
        await queue.close()
    async with AsyncQueue(url) as again:
        assert await again.migrate() == []


async def test_store_opened_without_migrating_applies_each_version_once(
    fresh_db_urls: FreshUrls,
) -> None:
    url = fresh_db_urls()
    store = make_store(url)
    dialect = _dialect(url)
    try:
        await store.open(migrate=False)
        assert await store.schema_version() == 0
        assert await store.migrate() == [m.version for m in available(dialect)]
        assert await store.migrate() == []
        assert await store.schema_version() == latest_version(dialect)
    finally:
        await store.close()


async def test_first_migrate_of_a_fresh_database_reports_the_versions_it_applied(
    fresh_db_urls: FreshUrls,
) -> None:
    url = fresh_db_urls()
    queue = AsyncQueue(url)
    try:
        assert await queue.migrate() == [m.version for m in available(_dialect(url))]
    finally:
        await queue.close()


async def test_data_survives_reopening(fresh_db_urls: FreshUrls) -> None:
    url = fresh_db_urls()
    async with AsyncQueue(url) as queue:
        task = (await queue.submit(title="kept", task_type="docs")).task
    async with AsyncQueue(url) as queue:
        assert (await queue.get(task.id)).title == "kept"
        assert await queue.migrate() == []


# --- several processes at once ---------------------------------------------------------------


def _open_at_once(urls: list[str], barrier: Barrier, out: Any) -> None:
    """A separate process: for each fresh database, open it the moment every other process does."""
    for index, url in enumerate(urls):
        try:
            barrier.wait(timeout=60)
            with agentqueue.Queue(url) as q:
                q.open()
                task = q.submit(title=f"from {index}", task_type="docs").task
                out.put((index, "ok", str(task.id)))
        except BaseException as exc:
            out.put((index, "error", f"{type(exc).__name__}: {exc}"))


async def test_processes_opening_a_fresh_database_at_once_all_succeed(
    fresh_db_urls: FreshUrls,
) -> None:
    processes, rounds = 3, 6
    urls = [fresh_db_urls() for _ in range(rounds)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_at_once, args=(urls, barrier, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        replies = [out.get(timeout=120) for _ in range(processes * rounds)]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    errors = [r for r in replies if r[1] != "ok"]
    assert not errors, errors
    for index, url in enumerate(urls):
        async with AsyncQueue(url) as queue:
            assert await queue.migrate() == []
            assert await queue.store.schema_version() == latest_version(_dialect(url))
            assert (await queue.stats()).total == processes, f"database {index}"
            assert (await queue.verify()).ok
