"""SQLite's writer connection, on a thread of this process or in a process of its own.

Every write the SQLite dialect makes is one of a few operations on its writer connection
(``ops.perform``): a named query with its follow-ups, alone or as a transaction of its own; a
transaction's BEGIN, COMMIT or ROLLBACK; the migrations' two steps. The dialect runs them on a
thread of its process (:class:`ThreadConnection`, the default) or sends them to a process of its
own (:class:`ProcessWriter`, ``?writer=process``), which holds the connection and runs the same
function (``ops.child_main``), or in a process while busy and on a thread while quiet
(:class:`AutoWriter`, ``?writer=auto``, what the long-running commands choose). On a thread the
statements' work shares the interpreter lock with the event loop (sqlite3 takes it for every row
it returns and every Python function SQL calls: the audit hashes), so the two take turns; in a
process each has a core. Both take operations as they are handed over and run them in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ...domain.audit import Keyring, installed_keys
from ...domain.errors import StoreUnavailable
from ..errors import from_sqlite
from .ops import LENGTH, frame, open_connection, perform

log = logging.getLogger("agentqueue.store")
T = TypeVar("T")

WRITER_MODES = ("thread", "process", "auto")


# --- in a thread ------------------------------------------------------------------------------


class ThreadConnection:
    """A connection on a thread of this process (sqlite3 is synchronous): the reader's always,
    the writer's by default."""

    def __init__(self, path: Path, busy_timeout_ms: int, synchronous: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentqueue-sqlite")
        self._args = (path, busy_timeout_ms, synchronous)
        self.conn: sqlite3.Connection | None = None

    def _hand(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """``fn`` handed to the thread now; its sqlite3 errors classified."""

        def call() -> T:
            try:
                if self.conn is None:
                    self.conn = open_connection(*self._args)
                return fn(self.conn)
            except sqlite3.Error as exc:
                raise from_sqlite(exc) from exc

        return asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the connection, in its thread."""
        return await self._hand(fn)

    async def ready(self) -> None:
        """Nothing to start: the thread starts with its first call."""

    def submit(self, op: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """:func:`perform` handed to the thread now (calls run in the order handed)."""
        return self._hand(lambda c: perform(c, op, args))

    async def op(self, op: str, *args: Any) -> Any:
        """:func:`perform` in the thread."""
        return await self.submit(op, args)

    async def close(self) -> None:
        if self.conn is not None:
            await self.run(lambda c: c.close())
            self.conn = None
        self._executor.shutdown(wait=True)


# --- in a process -----------------------------------------------------------------------------

_HOME = str(Path(__file__).resolve().parents[3])
"""The folder holding the agentqueue package this module is part of."""
_CHILD = "from agentqueue.store.sqlite.ops import child_main; child_main()"


class _Replies(asyncio.Protocol):
    """The parent's end of the socket: each reply resolves the oldest request waiting (the
    process answers in order)."""

    def __init__(self) -> None:
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 4:
            (size,) = LENGTH.unpack_from(buffer, start)
            if len(buffer) - start - 4 < size:
                break
            kind, value = pickle.loads(memoryview(buffer)[start + 4 : start + 4 + size])
            start += 4 + size
            future = self.waiting.popleft()
            if future.cancelled():
                continue
            if kind == "ok":
                future.set_result(value)
            else:
                future.set_exception(value)
        if start:
            del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(StoreUnavailable("SQLite: the writer process ended"))


class ProcessWriter:
    """The writer connection in a child process; the same operations, sent as messages."""

    def __init__(self, path: Path, busy_timeout_ms: int, synchronous: str) -> None:
        self._args = (str(path), busy_timeout_ms, synchronous)
        self._process: subprocess.Popen[bytes] | None = None
        self._replies: _Replies | None = None
        self._keys: Keyring | None = None
        self._starting: asyncio.Future[_Replies] | None = None

    def _spawn(self) -> socket.socket:
        """Start the process; the parent's end of its socket."""
        parent, child = socket.socketpair()
        try:
            env = dict(os.environ)
            # The same agentqueue as this process's, wherever it was imported from.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [_HOME, env.get("PYTHONPATH")]))
            self._process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        return parent

    async def _start(self) -> _Replies:
        parent = self._spawn()
        replies = _Replies()
        await asyncio.get_running_loop().create_connection(lambda: replies, sock=parent)
        return replies

    async def ready(self) -> None:
        """Start the process unless it runs (on first use, and again after it ended). One
        start at a time, seen through even if the caller that began it is cancelled."""
        replies = self._replies
        if replies is not None and not replies.lost:
            return
        if self._starting is None:
            if replies is not None:
                code = None if self._process is None else self._process.poll()
                log.warning(
                    "the SQLite writer process ended (%s); starting another",
                    "still exiting" if code is None else f"exit code {code}",
                )
            self._starting = asyncio.ensure_future(self._start())
            self._starting.add_done_callback(self._started)
        await asyncio.shield(self._starting)

    def _started(self, start: asyncio.Future[_Replies]) -> None:
        self._starting = None
        if not start.cancelled() and start.exception() is None:
            self._replies, self._keys = start.result(), None

    def submit(self, op: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """:func:`perform` sent to the process now (after :meth:`ready`): it answers in the
        order sent. Its future fails with StoreUnavailable if the process has ended."""
        future = asyncio.get_running_loop().create_future()
        replies = self._replies
        if replies is None or replies.lost or replies.transport is None:
            future.set_exception(StoreUnavailable("SQLite: the writer process ended"))
            return future
        keys = installed_keys()
        message: tuple[Any, ...] = (op, args, self._args)
        if keys is not self._keys:
            message = (op, args, self._args, keys)
            self._keys = keys
        replies.waiting.append(future)
        replies.transport.write(frame(message))
        return future

    async def op(self, op: str, *args: Any) -> Any:
        """:func:`perform` in the process."""
        await self.ready()
        return await self.submit(op, args)

    async def close(self) -> None:
        if self._starting is not None:
            # A start under way is seen through first, so the process it makes is closed too.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._starting)
        replies, process = self._replies, self._process
        self._replies = self._process = None
        if replies is not None and replies.transport is not None:
            replies.transport.close()
        if process is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, process.wait)


# --- a process while busy, a thread while quiet -----------------------------------------------


def _watch_ended(watch: asyncio.Task[None]) -> None:
    """Say why the watch that moves the writer stopped, unless it was stopped: the writes go on
    where they are, but no longer move."""
    if not watch.cancelled() and watch.exception() is not None:
        log.error("the SQLite writer's placement stopped: %r", watch.exception())


RETRY_START_SECS = 30.0
"""After the writer process could not be started, how long the thread writes before a try."""


class AutoWriter:
    """The writer in a process while writes keep it busy, on a thread once they are few
    (``?writer=auto``, what the long-running commands choose).

    A worker draining tasks keeps its writer busy most of the time, and there a process of its
    own is worth its cost (its own core instead of turns with the event loop); an idle worker
    writes once every few seconds, and there the process is 20 MiB for nothing. So a process is
    started with the writer, and the thread writes until it is ready (so its start is no part of
    the opener's); the writes move back to the thread when the writer has been busy less than
    ``quiet_share`` of the time for ``quiet_windows`` windows of ``window_secs`` in a row (the
    process is then closed), and to a process again when a
    window finds it busy ``busy_share`` of the time or more. Busy means at least one operation
    handed over and not yet answered.

    A move happens under the dialect's write lock, which every transaction holds from BEGIN to
    its end and every single write waits for, once what was handed over has been answered: so
    a transaction's statements all go to one connection, and the two never write side by side
    (a write left waiting for the file's lock on one while the other took it, transaction after
    transaction, could wait past the busy timeout).
    """

    window_secs = 0.5
    busy_share = 0.25
    quiet_share = 0.05
    quiet_windows = 10

    def __init__(
        self, path: Path, busy_timeout_ms: int, synchronous: str, lock: asyncio.Lock
    ) -> None:
        self.thread = ThreadConnection(path, busy_timeout_ms, synchronous)
        self.process = ProcessWriter(path, busy_timeout_ms, synchronous)
        self.current: ThreadConnection | ProcessWriter = self.thread
        self._lock = lock
        self._moving = asyncio.Lock()
        """One move at a time, each seen through (a process is closed only once unused)."""
        self._handed = 0
        self._answered_all = asyncio.Event()
        """Set while nothing handed over waits for its answer."""
        self._answered_all.set()
        self._busy_since = 0.0
        self._busy_secs = 0.0
        self._watch: asyncio.Task[None] | None = None
        self.moves = 0
        """Moves made (either way), for tests and logs."""

    async def ready(self) -> None:
        """The current connection ready; the watch that moves it started (with the first)."""
        if self._watch is None:
            self._watch = asyncio.ensure_future(self._watching())
            self._watch.add_done_callback(_watch_ended)
        await self.current.ready()

    def submit(self, op: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """:func:`perform` handed to the current connection now."""
        future = self.current.submit(op, args)
        if self._handed == 0:
            self._busy_since = time.monotonic()
            self._answered_all.clear()
        self._handed += 1
        future.add_done_callback(self._answered)
        return future

    def _answered(self, _: asyncio.Future[Any]) -> None:
        self._handed -= 1
        if self._handed == 0:
            self._busy_secs += time.monotonic() - self._busy_since
            self._answered_all.set()

    async def op(self, op: str, *args: Any) -> Any:
        """:func:`perform` on the current connection."""
        await self.ready()
        return await self.submit(op, args)

    def _busy_share(self, since: float, now: float) -> float:
        """The share of the time since ``since`` that the writer was busy (and restart the
        count from ``now``)."""
        busy = self._busy_secs
        if self._handed:
            busy += now - self._busy_since
            self._busy_since = now
        self._busy_secs = 0.0
        return busy / max(now - since, 1e-9)

    async def _watching(self) -> None:
        # After a start that failed, the next try waits a while (one warning, not two a second).
        retry_at = 0.0 if await self.move_to_process() else time.monotonic() + RETRY_START_SECS
        quiet = 0
        since = time.monotonic()
        while True:
            await asyncio.sleep(self.window_secs)
            now = time.monotonic()
            share = self._busy_share(since, now)
            since = now
            if self.current is self.thread:
                if share >= self.busy_share and now >= retry_at:
                    if not await self.move_to_process():
                        retry_at = time.monotonic() + RETRY_START_SECS
                    since = time.monotonic()
                    self._busy_share(since, since)
            elif share < self.quiet_share:
                quiet += 1
                if quiet >= self.quiet_windows:
                    quiet = 0
                    await self.move_to_thread()
            else:
                quiet = 0

    async def move_to_process(self) -> bool:
        """Start the process (this process goes on writing on the thread meanwhile), then
        send the writes there; false if it could not be started (the thread goes on)."""
        async with self._moving:
            if self.current is self.process:
                return True
            try:
                await self.process.ready()
            except Exception as exc:  # it stays on the thread, which works
                log.warning("could not start the SQLite writer process (%s); on a thread", exc)
                return False
            await self._switch(self.process)
            return True

    async def move_to_thread(self) -> None:
        """Send the writes to the thread, then close the process once it has answered."""
        async with self._moving:
            if self.current is self.thread:
                return
            await self._switch(self.thread)  # the process has answered all it was handed
            await self.process.close()

    async def _switch(self, to: ThreadConnection | ProcessWriter) -> None:
        """Send the writes to ``to`` from now on: under the write lock (no transaction open, no
        write handed over meanwhile), once everything handed over has been answered."""
        async with self._lock:
            await self._answered_all.wait()
            self.current = to
            self.moves += 1

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        await self.process.close()
        await self.thread.close()
