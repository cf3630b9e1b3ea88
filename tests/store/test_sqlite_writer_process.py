"""SQLite's writer in a process of its own (``?writer=process``, and the long-running commands'
``auto`` writer while they are busy): it lives as long as its parent and no longer, ignores the
signals a terminal or a service manager sends the whole process group, and when it dies the next
write starts another; what a transaction had written when it died is rolled back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlite_writer_helpers import alive, killed_mid_transaction, stat, worker_names

from agentqueue import AsyncQueue
from agentqueue.domain.errors import InvalidInput, StoreLocked
from agentqueue.store.sqlite.dialect import sqlite_store

WITHIN_SECS = 20.0


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}?writer=process") as q:
        yield q


def _writer_pid(queue: AsyncQueue) -> int:
    process = queue.store._d._writer._process  # type: ignore[attr-defined]
    assert process is not None
    return int(process.pid)


async def test_the_writes_are_made_by_a_child_process(queue: AsyncQueue) -> None:
    made = await queue.submit(title="t", task_type="docs")
    pid = _writer_pid(queue)
    assert pid != os.getpid() and alive(pid)
    assert int(stat(pid)[1]) == os.getpid()  # its parent: this process
    assert (await queue.get(made.task.id)).title == "t"
    assert (await queue.verify()).ok
    await queue.close()
    assert not alive(pid)


async def test_errors_in_the_writer_arrive_classified(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    async with AsyncQueue(f"sqlite:///{path}") as queue:
        await queue.submit(title="t", task_type="docs")
    store = sqlite_store(f"sqlite:///{path}", busy_timeout_ms=200, writer="process")
    await store.open()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's write lock, held
        with pytest.raises(StoreLocked, match="another process holds the write lock"):
            await store.record_worker("w", 1, 0, datetime.now(UTC))
        holder.execute("ROLLBACK")
        await store.record_worker("w", 1, 0, datetime.now(UTC))
        assert worker_names(path) == ["w"]
    finally:
        holder.close()
        await store.close()


def test_an_unknown_writer_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}?writer=fork")
    assert refused.value.fields == ["db.writer"] and "'fork'" in str(refused.value)


async def test_the_writer_ignores_sigint_and_sigterm(queue: AsyncQueue) -> None:
    await queue.submit(title="first", task_type="docs")
    pid = _writer_pid(queue)
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert alive(pid)
    await queue.submit(title="second", task_type="docs")
    assert _writer_pid(queue) == pid


async def test_a_writer_that_died_is_started_again_and_its_open_transaction_is_gone(
    queue: AsyncQueue, tmp_path: Path
) -> None:
    await killed_mid_transaction(queue, lambda: _writer_pid(queue), tmp_path / "q.db")


async def test_a_cancelled_write_does_not_start_a_second_process(queue: AsyncQueue) -> None:
    store = queue.store
    writer = store._d._writer  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    first = _writer_pid(queue)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + WITHIN_SECS
    while not writer._replies.lost:  # the parent has seen it end
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    spawned = []
    real = writer._spawn

    def spawn() -> object:
        spawned.append(1)
        return real()

    writer._spawn = spawn
    # A write that begins the start and is cancelled at once; the start goes on, and the next
    # write waits for it rather than starting another process.
    cancelled = asyncio.create_task(store.record_worker("cancelled", 1, 0, now))
    await asyncio.sleep(0)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    await store.record_worker("next", 1, 0, now)
    assert len(spawned) == 1 and alive(_writer_pid(queue))


PARENT = """
import asyncio, sys
from datetime import UTC, datetime
from agentqueue import AsyncQueue

async def main():
    queue = AsyncQueue(sys.argv[1])
    await queue.open()
    await queue.submit(title="kept", task_type="docs")
    d = queue.store._d
    async with d.transaction() as s:
        await s.execute("record_worker",
                        d.codec.params(name="in-tx", slots=1, busy=0, now=datetime.now(UTC)))
        print(d._writer._process.pid, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def _killed_in_a_transaction(url: str) -> int:
    """Run PARENT on ``url`` and SIGKILL it inside its transaction; its writer's pid."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        writer = int(parent.stdout.readline())
        assert alive(writer)
    finally:
        parent.kill()
        parent.wait()
    return writer


async def test_the_writer_ends_with_its_parent_and_the_file_is_left_usable(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}?writer=process"
    writer = _killed_in_a_transaction(url)
    deadline = time.monotonic() + WITHIN_SECS
    while alive(writer):
        assert time.monotonic() < deadline, "the writer outlived its parent"
        await asyncio.sleep(0.05)
    # The write lock the parent's open transaction held is free, and what it wrote is gone.
    async with AsyncQueue(url) as queue:
        await queue.submit(title="next", task_type="docs")
        assert sorted(t.title for t in (await queue.list()).items) == ["kept", "next"]
        assert (await queue.verify()).ok
    assert worker_names(tmp_path / "q.db") == []
