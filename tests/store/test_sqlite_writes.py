"""A write on SQLite (``SQLiteDialect.write``: claims, completions, inserts, lease renewals) is
one hand-over to the writer connection (its thread, or its process), BEGIN, the statement and
COMMIT together, and each of its statements commits by itself, as on PostgreSQL: the file's one
write lock is never held while the event loop and the writer hand over. Such writes are handed
over as they come, without waiting for each other; one handed over while a transaction is open
waits for its end and is never part of it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentqueue import AsyncQueue, TaskState
from agentqueue.domain.states import Action, bulk_event
from agentqueue.store.errors import StoreError


@pytest.fixture(params=["thread", "process", "auto"])
async def queue(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}?writer={request.param}") as q:
        assert q.store._d.writer_mode == request.param  # type: ignore[attr-defined]
        if request.param == "auto":
            # Where a busy worker's writes go: its process, once started (the thread writes
            # meanwhile, and a move in the middle of a test would hold its writes back).
            await q.stats()
            writer = q.store._d._writer  # type: ignore[attr-defined]
            deadline = time.monotonic() + 30
            while writer.current is not writer.process:
                assert time.monotonic() < deadline, "the writer did not move to its process"
                await asyncio.sleep(0.02)
        yield q


def _count_hand_overs(queue: AsyncQueue) -> list[int]:
    """Counts every operation handed to the writer from now on, and (second) the most handed
    over and not yet answered at once."""
    writer = queue.store._d._writer  # type: ignore[attr-defined]
    real = writer.submit
    calls = [0, 0]
    pending: set[Any] = set()

    def submit(op: str, args: tuple[Any, ...]) -> Any:
        calls[0] += 1
        future = real(op, args)
        pending.add(future)
        future.add_done_callback(pending.discard)
        calls[1] = max(calls[1], len(pending))
        return future

    writer.submit = submit
    return calls


async def test_a_claim_and_a_completion_are_one_hand_over_each(queue: AsyncQueue) -> None:
    await queue.submit_many({"title": f"t{i}", "task_type": "docs"} for i in range(10))
    calls = _count_hand_overs(queue)
    claimed = await queue.claim(5, "w")
    assert len(claimed) == 5 and calls[0] == 1
    first = claimed[0]
    assert first.lock_token is not None
    # The set-wise completion a worker's outcome batch makes.
    now = datetime.now(UTC)
    heads = await queue.store.complete(
        [(first.id, first.lock_token, {"ok": True})], now, bulk_event(Action.COMPLETE, now, "w")
    )
    assert list(heads) == [first.id] and calls[0] == 2
    # Both committed: another connection (the reader) sees them.
    states = {t.id: t.state for t in await queue.store.get_tasks([t.id for t in claimed])}
    assert states[first.id] is TaskState.COMPLETED
    assert [states[t.id] for t in claimed[1:]] == [TaskState.EXECUTING] * 4
    assert (await queue.verify()).ok


async def test_each_statement_of_a_write_commits_by_itself(queue: AsyncQueue) -> None:
    store = queue.store
    d = store._d  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    before = store.commits
    with pytest.raises(StoreError):
        async with d.write() as s:
            await s.execute("record_worker", d.codec.params(name="w1", slots=4, busy=1, now=now))
            # A statement the database refuses (a parameter it names is missing).
            await s.execute("record_worker", d.codec.params(name="w2", now=now))
    # The first statement was committed on its own, the second rolled back whole.
    assert store.commits == before + 1
    assert _worker_names(queue) == ["w1"]
    # The connection is outside any transaction: the next write goes through.
    await store.record_worker("w3", 1, 0, now)
    assert _worker_names(queue) == ["w1", "w3"]


def _worker_names(queue: AsyncQueue) -> list[str]:
    """The workers recorded, read on a connection of its own."""
    conn = sqlite3.connect(queue.store._d.path)  # type: ignore[attr-defined]
    try:
        return [r[0] for r in conn.execute("SELECT name FROM aq_workers ORDER BY name")]
    finally:
        conn.close()


async def test_a_write_waits_for_an_open_transaction_and_is_not_part_of_it(
    queue: AsyncQueue,
) -> None:
    store = queue.store
    d = store._d  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    meanwhile: asyncio.Task[None] | None = None
    with pytest.raises(RuntimeError, match="rolled back"):
        async with d.transaction() as s:
            await s.execute("record_worker", d.codec.params(name="in-tx", slots=1, busy=0, now=now))
            # A write of another task while the transaction is open: it may not go to the
            # writer now (it would run inside the transaction, and be rolled back with it).
            meanwhile = asyncio.create_task(store.record_worker("beside", 1, 0, now))
            await asyncio.sleep(0.2)
            assert not meanwhile.done()
            raise RuntimeError("rolled back")
    assert meanwhile is not None
    await asyncio.wait_for(meanwhile, 30)
    assert _worker_names(queue) == ["beside"]


async def test_writes_handed_over_together_are_all_in_flight_and_all_commit(
    queue: AsyncQueue,
) -> None:
    store = queue.store
    now = datetime.now(UTC)
    before = store.commits
    calls = _count_hand_overs(queue)
    # Fifty writes at once: each is handed over without waiting for the one before.
    await asyncio.gather(*(store.record_worker(f"w{i:02}", 1, 0, now) for i in range(50)))
    assert calls[0] == 50 and store.commits == before + 50
    assert calls[1] == 50
    assert _worker_names(queue) == [f"w{i:02}" for i in range(50)]
