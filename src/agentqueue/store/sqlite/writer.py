"""SQLite's writer connection, in the store's thread or in a process of its own.

Every write the SQLite dialect makes is one of a few operations on its writer connection
(:func:`perform`): a named query with its follow-ups, alone or as a transaction of its own; a
transaction's BEGIN, COMMIT or ROLLBACK; the migrations' two steps. The dialect runs them in a
thread of its process (:class:`ThreadWriter`, the default) or sends them to a process of its
own (:class:`ProcessWriter`, ``?writer=process``), which holds the connection and runs the same
function. In a thread the statement's work shares the interpreter lock with the event loop
(sqlite3 takes it for every row it returns and every Python function SQL calls: the audit
hashes), so the two take turns; in a process each has a core.

The process is the parent's: it ignores SIGINT and SIGTERM (a terminal's Ctrl-C and a service
manager's stop reach the whole process group; the parent decides when to stop, and may still
write outcomes), and ends when the parent closes its end of the socket, or dies: a
transaction it had open is then rolled back by SQLite, as a thread's is when its process dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

from ...domain.audit import Keyring, chain_hash, install_keys, installed_keys, row_mac
from ...domain.errors import StoreError, StoreUnavailable
from ..errors import from_sqlite
from ..rows import dump
from ..sqlfile import load_queries

log = logging.getLogger("agentqueue.store")
Q = load_queries("sqlite")
T = TypeVar("T")

FOLLOW_UPS = {
    "insert_tasks": ("insert_events",),
    "apply": ("insert_events",),
    "purge": ("insert_events", "purge_logs"),
    "claim": ("claim_events",),
    "admit_for_claim": ("admit_events",),
    "admit": ("admit_events",),
    "admit_ids": ("admit_events",),
    "complete": ("complete_events",),
}
"""Writes whose events (and, for purge, captured output) SQLite records in statements of their
own, run in the same step over the ids the write returned (``:written``); PostgreSQL does it in
the one statement."""

WRITER_MODES = ("thread", "process")


def register_functions(conn: sqlite3.Connection) -> None:
    """The domain's audit hash and a UUID maker, for the set-wise hot transitions."""
    conn.create_function("aq_event_hash", 5, chain_hash, deterministic=True)
    conn.create_function("aq_row_mac", 8, row_mac, deterministic=True)
    conn.create_function("aq_uuid", 0, lambda: str(uuid4()))


def open_connection(
    path: Path, busy_timeout_ms: int, synchronous: str, *, rows: bool = True
) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode with the audit functions; rows by name
    (sqlite3.Row) unless ``rows`` is false (plain tuples, to be sent elsewhere)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                           timeout=busy_timeout_ms / 1000)  # fmt: skip
    try:
        if rows:
            conn.row_factory = sqlite3.Row
        register_functions(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _enter_wal(conn, busy_timeout_ms)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


def _enter_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    # Turning a new file to WAL takes an exclusive lock, and while another process opens the
    # same new file SQLite answers "database is locked" at once, without the busy handler:
    # wait for it here, up to the busy timeout.
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


# --- the operations ---------------------------------------------------------------------------


def fetch(
    c: sqlite3.Connection, query: str, params: Mapping[str, Any]
) -> tuple[list[str], list[Any]]:
    """The column names and rows of ``query``, after its follow-up statements if it has any."""
    cursor = c.execute(Q[query], params)
    rows = cursor.fetchall()
    names = [d[0] for d in cursor.description] if cursor.description else []
    then = FOLLOW_UPS.get(query)
    if then and rows:
        at = names.index("id")
        written = {**params, "written": dump([row[at] for row in rows])}
        for follow_up in then:
            c.execute(Q[follow_up], written)
    return names, rows


def execute(c: sqlite3.Connection, query: str, params: Mapping[str, Any]) -> int:
    """Rows touched by ``query``."""
    return c.execute(Q[query], params).rowcount


def committed(c: sqlite3.Connection, fn: Callable[[], T]) -> T:
    """``fn`` as a transaction of its own: BEGIN IMMEDIATE, ``fn``, COMMIT (a ROLLBACK if any
    of it fails)."""
    c.execute("BEGIN IMMEDIATE")
    try:
        out = fn()
        c.execute("COMMIT")
    except BaseException:
        if c.in_transaction:
            c.execute("ROLLBACK")
        raise
    return out


def end(c: sqlite3.Connection, statement: str) -> None:
    """BEGIN IMMEDIATE, COMMIT or ROLLBACK (a ROLLBACK with no transaction open does
    nothing: the process that held it may have ended)."""
    if statement == "ROLLBACK" and not c.in_transaction:
        return
    c.execute(statement)


def applied_versions(c: sqlite3.Connection) -> set[int]:
    """Versions recorded in aq_schema_version."""
    c.execute(Q["create_version_table"])
    return {row[0] for row in c.execute(Q["applied_versions"])}


def apply_migration(c: sqlite3.Connection, version: int, name: str, statements: list[str]) -> bool:
    """Apply one migration in a transaction unless another process did."""
    c.execute("BEGIN IMMEDIATE")
    try:
        if version in {row[0] for row in c.execute(Q["applied_versions"])}:
            c.execute("ROLLBACK")
            return False
        for statement in statements:
            c.execute(statement)
        c.execute(Q["record_version"], {"version": version, "name": name})
        c.execute("COMMIT")
        return True
    except BaseException:
        c.execute("ROLLBACK")
        raise


def perform(c: sqlite3.Connection, op: str, args: tuple[Any, ...]) -> Any:
    """Operation ``op`` with ``args`` on the writer connection: ``fetch`` and ``execute`` (query,
    params, commit: a transaction of its own when true), ``end`` (statement), and the
    migrations' ``applied_versions`` and ``apply_migration`` (version, name, statements)."""
    if op == "fetch":
        query, params, commit = args
        if commit:
            return committed(c, lambda: fetch(c, query, params))
        return fetch(c, query, params)
    if op == "execute":
        query, params, commit = args
        if commit:
            return committed(c, lambda: execute(c, query, params))
        return execute(c, query, params)
    if op == "end":
        return end(c, *args)
    if op == "applied_versions":
        return applied_versions(c)
    if op == "apply_migration":
        return apply_migration(c, *args)
    raise ValueError(f"unknown writer operation {op!r}")


# --- in a thread ------------------------------------------------------------------------------


class ThreadWriter:
    """The writer connection on a thread of this process (sqlite3 is synchronous)."""

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
        return await self.run(lambda c: perform(c, op, args))

    async def close(self) -> None:
        if self.conn is not None:
            await self.run(lambda c: c.close())
            self.conn = None
        self._executor.shutdown(wait=True)


# --- in a process -----------------------------------------------------------------------------

_LEN = struct.Struct("!I")
_HOME = str(Path(__file__).resolve().parents[3])
"""The folder holding the agentqueue package this module is part of."""
_CHILD = "from agentqueue.store.sqlite.writer import child_main; child_main()"


def _frame(value: Any) -> bytes:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


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
            (size,) = _LEN.unpack_from(buffer, start)
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
        """Start the process unless it runs (on first use, and again after it ended)."""
        replies = self._replies
        if replies is not None and not replies.lost:
            return
        if replies is not None and self._starting is None:
            code = None if self._process is None else self._process.poll()
            log.warning(
                "the SQLite writer process ended (%s); starting another",
                "still exiting" if code is None else f"exit code {code}",
            )
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            replies = await asyncio.shield(self._starting)
        finally:
            self._starting = None
        if self._replies is None or self._replies.lost:
            self._replies, self._keys = replies, None

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
        replies.transport.write(_frame(message))
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


def child_main() -> None:
    """The writer process: reads requests from the socket named by its argument, answers each in
    order, and ends when the parent's end closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[1]))
    reader = sock.makefile("rb")
    conn: sqlite3.Connection | None = None
    try:
        while True:
            head = reader.read(4)
            if len(head) < 4:
                return
            (size,) = _LEN.unpack(head)
            message = pickle.loads(reader.read(size))
            op, args, opened = message[:3]
            if len(message) > 3:
                install_keys(message[3])
            try:
                if conn is None:
                    conn = open_connection(Path(opened[0]), opened[1], opened[2], rows=False)
                reply: tuple[str, Any] = ("ok", perform(conn, op, args))
            except sqlite3.Error as exc:
                reply = ("error", from_sqlite(exc))
            except Exception as exc:  # answered to the parent, which raises it
                reply = ("error", StoreError(f"SQLite writer: {type(exc).__name__}: {exc}"))
            sock.sendall(_frame(reply))
    finally:
        if conn is not None:
            conn.close()
