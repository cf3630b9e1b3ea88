"""Contract of a store's life: opening (with or without migrating), migrations applied once in
order, the schema version, what the backend is, and closing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from agentqueue import ManualClock
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store, make_store
from agentqueue.store.migrate import available

from .conftest import insert


async def test_open_without_migrating_then_migrate_applies_every_version_once(
    fresh_db_urls: Callable[[], str],
) -> None:
    """On a new database open(migrate=False) leaves the schema at version 0; migrate applies
    every shipped migration in order and returns their versions, reaching
    latest_schema_version; a second migrate applies none."""
    store = make_store(fresh_db_urls())
    await store.open(migrate=False)
    try:
        shipped = [m.version for m in available(store.dialect)]
        assert store.latest_schema_version() == shipped[-1]
        assert await store.schema_version() == 0
        assert await store.migrate() == shipped
        assert await store.schema_version() == store.latest_schema_version()
        assert await store.migrate() == []
    finally:
        await store.close()


async def test_open_migrates_and_data_outlives_close(
    fresh_db_urls: Callable[[], str], clock: ManualClock
) -> None:
    """open() migrates a new database to the latest version; what was written before close is
    there after opening again, and reopening migrates nothing more."""
    url = fresh_db_urls()
    store = make_store(url)
    await store.open()
    latest = available(store.dialect)[-1].version
    assert await store.schema_version() == latest
    await store.pause("docs", "alice", "", clock.now())
    await store.close()
    reopened_store = make_store(url)
    await reopened_store.open()
    try:
        assert [p.task_type for p in await reopened_store.paused()] == ["docs"]
        assert await reopened_store.migrate() == []
        assert await reopened_store.schema_version() == latest
    finally:
        await reopened_store.close()


async def test_dialect_and_push_notifications_describe_the_backend(db_url: str) -> None:
    """dialect names the backend; only PostgreSQL pushes notices to listeners."""
    store = make_store(db_url)
    await store.open()
    try:
        expected = ("sqlite", False) if db_url.startswith("sqlite:") else ("postgres", True)
        assert (store.dialect, store.push_notifications) == expected
        # The database writes apart from this process on PostgreSQL and from SQLite's writer
        # process, not from its thread (the default unless the opener or the URL says).
        apart = not db_url.startswith("sqlite:") or "writer=process" in db_url
        assert store.separate_writer is apart
    finally:
        await store.close()
    if db_url.startswith("sqlite:") and "writer=" not in db_url:
        chosen = make_store(db_url, sqlite_writer="process")
        assert chosen.separate_writer is True
        await chosen.close()


async def test_commits_counts_write_transactions_and_not_reads(store: Store, rt: Runtime) -> None:
    """``commits`` goes up by one for each committed write (a one-shot command that met a lock
    is run again only while it is still zero), and not for reads or a rolled-back
    transaction."""
    before = store.commits
    await store.get_tasks([])
    await store.count_by_state()
    assert store.commits == before
    await insert(rt)
    assert store.commits == before + 1
    with contextlib.suppress(RuntimeError):
        async with store.transaction():
            raise RuntimeError("rolled back")
    assert store.commits == before + 1
    async with store.transaction() as tx:
        await tx.lock([])
    assert store.commits == before + 2
