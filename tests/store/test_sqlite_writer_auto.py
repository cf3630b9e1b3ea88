"""SQLite's writer placed by how busy it is (``?writer=auto``, what the long-running commands
choose): a process of its own starts with it (the thread writes until it is ready), the writes
move to a thread of this process when they have become few (and the process ends), and back to
a process when they are many again; a move never splits a transaction between the two
connections and never loses a write handed over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlite_writer_helpers import alive, killed_mid_transaction, worker_names

from agentqueue import AsyncQueue
from agentqueue.store.sqlite.writer import AutoWriter, ProcessWriter, ThreadConnection

WITHIN_SECS = 30.0


@pytest.fixture
def quick() -> Iterator[None]:
    """Windows of 50 ms and three quiet ones before a move to the thread (the defaults take
    seconds)."""
    saved = AutoWriter.window_secs, AutoWriter.quiet_windows
    AutoWriter.window_secs, AutoWriter.quiet_windows = 0.05, 3
    yield
    AutoWriter.window_secs, AutoWriter.quiet_windows = saved


@pytest.fixture
async def queue(quick: None, tmp_path: Path) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", sqlite_writer="auto") as q:
        yield q


def _writer(queue: AsyncQueue) -> AutoWriter:
    writer = queue.store._d._writer  # type: ignore[attr-defined]
    assert isinstance(writer, AutoWriter)
    return writer


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WITHIN_SECS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WITHIN_SECS:g} s: {what}"
        await asyncio.sleep(0.02)


async def test_the_thread_writes_while_the_process_starts(
    quick: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening and the first writes do not wait for the process: they go to the thread until
    it is ready, then the writes move there."""
    starting, release = asyncio.Event(), asyncio.Event()
    start = ProcessWriter._start

    async def held_start(self: ProcessWriter) -> Any:
        starting.set()
        await release.wait()
        return await start(self)

    monkeypatch.setattr(ProcessWriter, "_start", held_start)
    queue = AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", sqlite_writer="auto")
    try:
        try:
            # Opened, migrated and written while the process's start is held back.
            made = await asyncio.wait_for(queue.submit(title="t", task_type="docs"), WITHIN_SECS)
            writer = _writer(queue)
            assert starting.is_set() and isinstance(writer.current, ThreadConnection)
            assert writer.process._process is None
        finally:
            release.set()
        await _until(lambda: isinstance(writer.current, ProcessWriter), "moved to the process")
        assert (await queue.get(made.task.id)).title == "t"
        assert (await queue.verify()).ok
    finally:
        await queue.close()


async def test_a_process_starts_with_it_and_is_given_back_when_quiet(queue: AsyncQueue) -> None:
    writer = _writer(queue)
    await _until(lambda: isinstance(writer.current, ProcessWriter), "moved to the process")
    assert writer.process._process is not None
    pid = writer.process._process.pid
    assert pid != os.getpid() and alive(pid)
    await queue.submit(title="first", task_type="docs")
    # Nothing more to write: the writes move to this process's thread and the process ends.
    await _until(lambda: isinstance(writer.current, ThreadConnection), "moved to the thread")
    await _until(lambda: not alive(pid), "the writer process ended")
    assert writer.process._process is None
    made = await queue.submit(title="second", task_type="docs")
    assert writer.process._process is None  # written on the thread, no process started
    assert (await queue.get(made.task.id)).title == "second"
    assert (await queue.verify()).ok


async def test_a_writer_process_killed_mid_transaction_is_started_again(tmp_path: Path) -> None:
    """Killed while it holds a transaction: that transaction fails as when a database server
    goes away, what it wrote is rolled back, and the next write starts another process. (The
    default windows: no move back to the thread within the test.)"""
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", sqlite_writer="auto") as queue:
        writer = _writer(queue)
        await queue.stats()
        await _until(lambda: isinstance(writer.current, ProcessWriter), "moved to the process")

        def pid() -> int:
            assert writer.process._process is not None
            return int(writer.process._process.pid)

        await killed_mid_transaction(queue, pid, tmp_path / "q.db")


async def test_many_writes_move_it_back_to_a_process(queue: AsyncQueue) -> None:
    writer = _writer(queue)
    await _until(lambda: isinstance(writer.current, ThreadConnection), "moved to the thread")
    moves = writer.moves
    stop = asyncio.Event()

    async def keep_writing() -> int:
        made = 0
        while not stop.is_set():
            await asyncio.gather(
                *(queue.submit(title=f"t{made + i}", task_type="docs") for i in range(20))
            )
            made += 20
        return made

    writing = asyncio.create_task(keep_writing())
    try:
        await _until(lambda: isinstance(writer.current, ProcessWriter), "moved to a process")
    finally:
        stop.set()
        made = await writing
    assert writer.moves == moves + 1
    assert writer.process._process is not None and alive(writer.process._process.pid)
    stats = await queue.stats()
    assert sum(stats.by_state.values()) == made
    assert (await queue.verify()).ok


async def test_moves_never_split_a_transaction_nor_write_on_both_nor_lose_a_write(
    quick: None, tmp_path: Path
) -> None:
    """Moves back and forth, made as fast as they can be, while transactions of two statements
    (with a pause between) and single writes go on: each transaction's statements go to one
    connection (a statement sent to the other would wait for the file's write lock, which the
    transaction holds, and fail after the busy timeout), the two connections never have writes
    under way at once, and every write lands once."""
    path = tmp_path / "q.db"
    async with AsyncQueue(f"sqlite:///{path}?writer=thread") as setup:
        await setup.stats()  # migrated
    async with AsyncQueue(f"sqlite:///{path}", sqlite_writer="auto") as queue:
        store, writer = queue.store, _writer(queue)
        d = store._d  # type: ignore[attr-defined]
        await store.count_by_state()  # opened
        # Only the moves below: the watch that moves by load is stopped, and whatever it did
        # is undone (on the thread, the process closed).
        assert writer._watch is not None
        writer._watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer._watch
        await writer.move_to_thread()
        await writer.process.close()
        # A short busy timeout, so a split transaction fails in seconds rather than 30.
        writer.process._args = (writer.process._args[0], 2_000, writer.process._args[2])
        await writer.thread.run(lambda c: c.execute("PRAGMA busy_timeout = 2000"))
        # Each connection's operations under way; whether both ever had some at once.
        under_way: dict[str, set[asyncio.Future[Any]]] = {"thread": set(), "process": set()}
        both: list[str] = []
        for name, conn in (("thread", writer.thread), ("process", writer.process)):

            def counted(op: str, args: tuple[Any, ...], name: str = name, real: Any = conn.submit):
                future = real(op, args)
                mine, other = (
                    under_way[name],
                    under_way["process" if name == "thread" else "thread"],
                )
                mine.add(future)
                future.add_done_callback(mine.discard)
                if other:
                    both.append(f"{op} on the {name} while {len(other)} under way on the other")
                return future

            conn.submit = counted  # type: ignore[method-assign]
        now = datetime.now(UTC)
        written: list[str] = []
        moves = 0
        deadline = time.monotonic() + WITHIN_SECS

        def more(i: int) -> bool:
            """A fixed number of writes each, and on until the moves have gone both ways
            twice."""
            assert time.monotonic() < deadline, f"{moves} moves within {WITHIN_SECS:g} s"
            return i < 15 or moves < 4

        async def move() -> None:
            nonlocal moves
            while True:
                await writer.move_to_process()
                await asyncio.sleep(0.01)
                await writer.move_to_thread()
                moves += 2

        async def transactions(k: int) -> None:
            i = 0
            while more(i):
                async with d.transaction() as s:
                    for part in ("a", "b"):
                        name = f"tx{k}-{i:03}-{part}"
                        await s.execute(
                            "record_worker", d.codec.params(name=name, slots=1, busy=0, now=now)
                        )
                        await asyncio.sleep(0.005)
                written.extend([f"tx{k}-{i:03}-a", f"tx{k}-{i:03}-b"])
                i += 1

        async def singles(k: int) -> None:
            i = 0
            while more(i):
                await store.record_worker(f"one{k}-{i:03}", 1, 0, now)
                written.append(f"one{k}-{i:03}")
                await asyncio.sleep(0.002)
                i += 1

        mover = asyncio.create_task(move())
        try:
            await asyncio.gather(
                *(transactions(k) for k in range(3)), *(singles(k) for k in range(3))
            )
        finally:
            mover.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mover
        assert moves >= 4
    assert both == []
    assert worker_names(path) == sorted(written)


async def test_a_process_that_cannot_start_leaves_the_writes_on_the_thread(
    quick: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No process can be started (no memory, no fork): the thread writes everything, and a busy
    writer does not try again every window (one warning, not two a second)."""
    tries = 0

    def no_spawn(self: ProcessWriter) -> Any:
        nonlocal tries
        tries += 1
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(ProcessWriter, "_spawn", no_spawn)
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", sqlite_writer="auto") as queue:
        writer = _writer(queue)
        made = 0
        started = time.monotonic()
        # Busy for many windows: each would try again if a failed start were not waited out.
        while time.monotonic() - started < 20 * AutoWriter.window_secs:
            await asyncio.gather(
                *(queue.submit(title=f"t{made + i}", task_type="docs") for i in range(20))
            )
            made += 20
        assert isinstance(writer.current, ThreadConnection)
        assert sum((await queue.stats()).by_state.values()) == made
    assert tries == 1
    warned = [r for r in caplog.records if "could not start the SQLite writer process" in r.message]
    assert len(warned) == 1 and "Cannot allocate memory" in warned[0].message
