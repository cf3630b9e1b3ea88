"""What SQLite's writer connection does, wherever it lives: the few operations every write of
the SQLite dialect is made of (:func:`perform`), and the writer process's main loop
(:func:`child_main`, started by ``writer.ProcessWriter``). This module is all that process loads
besides the standard library (sqlite3, pickle, socket) and the audit's hashes: no event loop,
no store, no driver of another database, so it starts quickly and stays small.

The process is the parent's: it ignores SIGINT and SIGTERM (a terminal's Ctrl-C and a service
manager's stop reach the whole process group; the parent decides when to stop, and may still
write outcomes), and ends when the parent closes its end of the socket, or dies: a
transaction it had open is then rolled back by SQLite, as a thread's is when its process dies.
Requests and answers are pickled, each framed by its length; the process answers in order.
"""

from __future__ import annotations

import json
import pickle
import signal
import socket
import sqlite3
import struct
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

from ...domain.audit import chain_hash, install_keys, row_mac
from ...domain.errors import StoreError
from ..errors import from_sqlite
from ..sqlfile import load_queries

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
        # The ids as one JSON document, as every bulk statement reads them (rows.dump).
        ids = json.dumps([row[at] for row in rows], separators=(",", ":"), ensure_ascii=False)
        written = {**params, "written": ids}
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


# --- the writer process --------------------------------------------------------------------

LENGTH = struct.Struct("!I")
"""Each message's length, ahead of its pickle."""


def frame(value: Any) -> bytes:
    """``value`` pickled, with its length ahead."""
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(len(body)) + body


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
            (size,) = LENGTH.unpack(head)
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
            sock.sendall(frame(reply))
    finally:
        if conn is not None:
            conn.close()
