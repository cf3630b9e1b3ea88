"""SQLite's writer connection, on a thread of this process or in a process of its own.

Every write the SQLite dialect makes is one of a few operations on its writer connection
(``ops.perform``): a named query with its follow-ups, alone or as a transaction of its own; a
transaction's BEGIN, COMMIT or ROLLBACK; the migrations' two steps. The dialect runs them on a
thread of its process (:class:`ThreadConnection`, the default) or sends them to a process of its
own (:class:`ProcessWriter`, ``?writer=process``, what the long-running commands choose), which
holds the connection and runs the same function (``ops.child_main``). On a thread the
statements' work shares the interpreter lock with the event loop (sqlite3 takes it for every row
it returns and every Python function SQL calls: the audit hashes), so the two take turns; in a
process each has a core. Both take operations as they are handed over and run them in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
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

WRITER_MODES = ("thread", "process")


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
        replies, process = self._replies, self._process
        self._replies = self._process = None
        if replies is not None and replies.transport is not None:
            replies.transport.close()
        if process is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, process.wait)
