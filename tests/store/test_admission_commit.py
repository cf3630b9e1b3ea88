"""PostgreSQL: an admission under limits commits without waiting for the disk, and only it.

The admission lock turns synchronous_commit off for its own transaction (an admission a crash
loses leaves its tasks pending; the next commit that waits makes it durable). The setting must
never outlive that transaction on the pooled connection: every later claim and completion on it
would then be acknowledged before it is on disk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from agentqueue import AsyncQueue
from agentqueue.domain.states import Action, bulk_event
from agentqueue.store import Store
from agentqueue.store.base import ClaimParams
from agentqueue.store.postgres.dialect import postgres_store

pytestmark = pytest.mark.postgres


@pytest.fixture
async def one_connection(pg_url: str) -> AsyncIterator[Store]:
    """A store whose pool holds exactly one connection: every transaction shares it."""
    store = postgres_store(pg_url, min_size=1, max_size=1)
    await store.open()
    yield store
    await store.close()


async def _setting(conn: object) -> str:
    cur = await conn.execute("SELECT current_setting('synchronous_commit')")  # type: ignore[attr-defined]
    return str((await cur.fetchone())["current_setting"])


async def _pooled_setting(store: Store) -> str:
    async with store._d.read() as session:  # type: ignore[attr-defined]
        return await _setting(session._conn)


async def test_the_admission_transaction_commits_without_waiting_and_only_it(
    one_connection: Store,
) -> None:
    store = one_connection
    assert await _pooled_setting(store) == "on"
    async with store.transaction() as tx:
        await tx.lock_admission()
        assert await _setting(tx._s._conn) == "off"  # type: ignore[attr-defined]
        await tx.admission_room()
    # The same (only) connection, after the commit: back to the server's default.
    assert await _pooled_setting(store) == "on"
    async with store.transaction() as tx:
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]


async def test_an_admission_that_claims_commits_durably(one_connection: Store, pg_url: str) -> None:
    """The admitting worker's own claims start attempts as the admission commits: a
    transaction that claimed anything waits for the disk again; one that claimed nothing
    stays relaxed."""
    store = one_connection
    now = datetime.now(UTC)
    params = ClaimParams(1, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0)
    async with store.transaction() as tx:
        await tx.lock_admission()
        assert await tx.claim_next(params) == []
        assert await _setting(tx._s._conn) == "off"  # type: ignore[attr-defined]
    queue = AsyncQueue(pg_url)
    try:
        await queue.submit(title="t", task_type="bugfix")  # queued: admitted as submitted
    finally:
        await queue.close()
    async with store.transaction() as tx:
        await tx.lock_admission()
        assert len(await tx.claim_next(params)) == 1
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]
