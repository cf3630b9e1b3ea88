"""PostgreSQL: an admission under limits commits without waiting for the disk, and only it.

The admission lock turns synchronous_commit off for its own transaction (an admission a crash
loses leaves its tasks pending; the next commit that waits makes it durable). The setting must
never outlive that transaction on the pooled connection: every later claim and completion on it
would then be acknowledged before it is on disk.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentqueue import AsyncQueue
from agentqueue.config import Settings
from agentqueue.domain.states import Action, bulk_event
from agentqueue.scheduler.admission import admit_limited
from agentqueue.store import Store
from agentqueue.store.base import ClaimAdmission, ClaimParams, Tx
from agentqueue.store.tx import SQLTx

pytestmark = pytest.mark.postgres


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
        await tx.load_and_tenants(1)  # the lock goes with the first statement
        assert await _setting(tx._s._conn) == "off"  # type: ignore[attr-defined]
    # The same (only) connection, after the commit: back to the server's default.
    assert await _pooled_setting(store) == "on"
    async with store.transaction() as tx:
        await tx.load_and_tenants(1)
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]


async def test_an_admission_that_claims_commits_durably(one_connection: Store, pg_url: str) -> None:
    """The admitting worker's own claims start attempts as the admission commits: a relaxed
    transaction that claims waits for the disk again (from the claim on, sent with it); one
    that does not claim stays relaxed."""
    store = one_connection
    now = datetime.now(UTC)
    params = ClaimParams(1, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0)
    async with store.transaction() as tx:
        await tx.lock_admission()
        await tx.load_and_tenants(1)
        assert await _setting(tx._s._conn) == "off"  # type: ignore[attr-defined]
    queue = AsyncQueue(pg_url)
    try:
        await queue.submit(title="t", task_type="bugfix")  # queued: admitted as submitted
    finally:
        await queue.close()
    async with store.transaction() as tx:
        await tx.lock_admission()
        await tx.load_and_tenants(1)
        assert await _setting(tx._s._conn) == "off"  # type: ignore[attr-defined]
        assert len(await (await tx.claim_next(params)).get()) == 1
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]


async def test_an_admission_that_may_claim_is_not_relaxed_and_takes_no_statement_more(
    one_connection: Store, pg_url: str
) -> None:
    """Not relaxed, the lock leaves the session's setting alone, and a claim in it needs no
    statement to restore it (each statement is a round trip on the dispatch path)."""
    store = one_connection
    queue = AsyncQueue(pg_url)
    try:
        await queue.submit(title="t", task_type="bugfix")  # queued: admitted as submitted
    finally:
        await queue.close()
    now = datetime.now(UTC)
    params = ClaimParams(1, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0)
    async with store.transaction() as tx:
        await tx.lock_admission(relaxed=False)
        await tx.load_and_tenants(1)
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]
        asked: list[str] = []

        async def durably() -> None:
            asked.append("commit_durably")

        tx._s.commit_durably = durably  # type: ignore[attr-defined]
        assert len(await (await tx.claim_next(params)).get()) == 1
        assert asked == []
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]


async def test_the_scheduler_of_a_worker_admits_durably_and_a_lone_scheduler_relaxed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """admit_limited with a hand-over (a worker's scheduler, whose claims start attempts as the
    admission commits) does not relax the commit; without one (a scheduler of its own) it
    does. The setting is read in each admission's transaction, right after its lock."""
    seen: list[str] = []
    locked = SQLTx.lock_admission

    async def lock_and_look(self: SQLTx, relaxed: bool = True) -> None:
        await locked(self, relaxed)
        await self.load_and_tenants(1)  # the lock goes with the first statement
        seen.append(await _setting(self._s._conn))  # type: ignore[attr-defined]

    monkeypatch.setattr(SQLTx, "lock_admission", lock_and_look)

    async def hand_over(tx: Tx, now: datetime, agents: frozenset[str | None]) -> Any:
        return lambda committed: None

    # A cap and a rate limit: the planner admits (a cap alone leaves it to the claims).
    settings = Settings(
        admission={"max_active": 10},
        task_types={"docs": {"rate_limit": "docs"}},
        rate_limits={"docs": {"per_minute": 6000, "burst": 1000}},
    )
    queue = AsyncQueue(pg_url, settings=settings)
    try:
        await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(3)])
        rt = await queue.runtime()
        assert len(await admit_limited(rt, 1, hand_over)) == 1
        assert len(await admit_limited(rt, 1)) == 1
    finally:
        await queue.close()
    assert seen == ["on", "off"]


async def test_a_claim_that_admits_commits_durably(one_connection: Store, pg_url: str) -> None:
    """A claim that admits (a global cap alone) takes the admission lock, never relaxed: the
    attempts it starts are on disk when it commits."""
    store = one_connection
    queue = AsyncQueue(pg_url, settings=Settings(admission={"max_active": 10}))
    try:
        await queue.submit(title="t", task_type="bugfix")  # pending: the claim admits it
    finally:
        await queue.close()
    now = datetime.now(UTC)
    admit = ClaimAdmission(10, True, bulk_event(Action.ADMIT, now, "w1"))
    params = ClaimParams(1, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0, admit=admit)
    async with store.transaction() as tx:
        assert len(await (await tx.claim_next(params)).get()) == 1
        assert await _setting(tx._s._conn) == "on"  # type: ignore[attr-defined]
