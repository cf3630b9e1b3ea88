"""Migration 0019, the index audit of aq_tasks, from a database at 0018: tasks in the states it
concerns read the same before and after (listings by state, the admitted counts admission
reads), and on PostgreSQL the state index no longer holds the hot path's states."""

from __future__ import annotations

import psycopg

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.domain.states import TaskState
from agentqueue.store import make_store
from agentqueue.store.migrate import available


def is_sqlite(url: str) -> bool:
    """Whether ``url`` names a SQLite file."""
    return url.startswith("sqlite:")


LISTED = (
    TaskState.PENDING,
    TaskState.QUEUED,
    TaskState.EXECUTING,
    TaskState.COMPLETED,
    TaskState.FAILED,
)


async def _listings(queue: AsyncQueue) -> dict[TaskState, list[str]]:
    out: dict[TaskState, list[str]] = {}
    for state in LISTED:
        page = await queue.list(state=state, limit=100)
        out[state] = [str(t.id) for t in page.items]
    return out


async def _admitted(queue: AsyncQueue) -> tuple[int, list[tuple[str, str | None, int]]]:
    store = queue.store
    count = (await store.admission_room()).active
    async with store.transaction() as tx:
        load = sorted(
            ((r.tenant, r.agent, r.count) for r in (await tx.load_and_tenants(1))[0]),
            key=lambda r: r[0],
        )
    return count, load


async def test_migrating_from_18_keeps_listings_and_admitted_counts(
    db_url: str, clock: ManualClock, settings: Settings
) -> None:
    if not is_sqlite(db_url):
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
    store = make_store(db_url)
    await store.open(migrate=False)
    for migration in available(store.dialect):
        if migration.version < 19:
            await store._d.apply_migration(migration)  # type: ignore[attr-defined]
    queue = AsyncQueue(db_url, clock=clock, settings=settings, store=store)
    queue._opened = True  # opened above, without migrating past 18
    try:
        for i in range(9):
            await queue.submit(title=f"t{i}", task_type="bugfix", tenant=f"tenant{i % 2}")
        await queue.admit(7)  # two stay pending
        claimed = await queue.claim(5, "w1")  # two stay queued
        await queue.complete(claimed[0].id, claimed[0].lock_token)
        await queue.complete(claimed[1].id, claimed[1].lock_token)
        await queue.fail(claimed[2].id, claimed[2].lock_token, error="boom", retryable=False)
        before = await _listings(queue)
        admitted = await _admitted(queue)
        assert [len(before[s]) for s in LISTED] == [2, 2, 2, 2, 1]
        assert admitted[0] == 4
        assert sum(n for _, _, n in admitted[1]) == 4

        assert 19 in await queue.migrate()

        assert await _listings(queue) == before
        assert await _admitted(queue) == admitted
        if not is_sqlite(db_url):
            with psycopg.connect(db_url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT indexdef FROM pg_indexes WHERE indexname = 'aq_tasks_state'"
                ).fetchone()
                assert row is not None
                assert "WHERE" in row[0]
                for state in ("completed", "queued", "executing"):
                    assert f"'{state}'" in row[0]
    finally:
        await queue.close()
