"""The SQLite dialect: one file in WAL mode, writes under BEGIN IMMEDIATE, a busy timeout.

sqlite3 is synchronous, so each connection lives off the event loop and async callers hop to it.
One connection writes, on a thread of this process, in a process of its own, or in a process
while busy and on a thread while quiet (``writer.py``;
transactions are serialised in-process by a lock and across processes by SQLite's write lock);
another reads, on a thread, which WAL lets run beside the writer. Only what differs from
PostgreSQL is here; the operations are in ``store/sql.py``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from ...domain.errors import InvalidInput, StoreError
from ..base import CHANNEL_CHANGED, Later, Notice
from ..errors import from_sqlite
from ..migrate import Migration
from ..rows import Codec, Row, dump, load_json_text
from ..sql import SQLStore
from ..sqlfile import load_queries
from .writer import WRITER_MODES, AutoWriter, ProcessWriter, ThreadConnection

Q = load_queries("sqlite")
T = TypeVar("T")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(value: datetime | None) -> int | None:
    """Aware datetime to integer microseconds since the epoch."""
    if value is None:
        return None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int | None) -> datetime | None:
    """Integer microseconds since the epoch to an aware UTC datetime."""
    if value is None:
        return None
    # Integer arithmetic, exact; twice as fast as fromtimestamp + replace (ten of these a task
    # row: the claim's decoding).
    return _EPOCH + timedelta(microseconds=value)


def _micros(name: str, secs: float) -> tuple[str, int]:
    # Aging divides: at least one microsecond.
    value = int(secs * 1_000_000)
    return f"{name}_us", max(1, value) if name == "aging" else value


def _json_in(value: str | None) -> Any:
    return None if value is None else load_json_text(value)


CODEC = Codec(
    time_out=to_micros,
    time_in=from_micros,
    uuid_out=lambda u: None if u is None else str(u),
    uuid_in=lambda s: None if s is None else UUID(s),
    uuids_out=lambda ids: json.dumps([str(i) for i in ids]),
    uuids_in=lambda text: tuple(UUID(s) for s in load_json_text(text)),
    json_in=_json_in,
    time_param=to_micros,
    uuid_param=str,
    list_param=dump,
    uuids_param=lambda ids: dump([str(i) for i in ids]),
    duration_param=_micros,
    native=False,
)


def parse_sqlite_url(url: str) -> tuple[Path, dict[str, str]]:
    """``sqlite:///relative.db`` or ``sqlite:////absolute.db``, with optional ``?key=value``."""
    rest = url.removeprefix("sqlite://")
    if not rest.startswith("/"):
        raise InvalidInput("a SQLite URL looks like sqlite:///file.db", "db")
    path_part, _, query = rest[1:].partition("?")
    if not path_part or path_part == ":memory:":
        raise InvalidInput("SQLite needs a file path (in-memory databases are not shared)", "db")
    options = dict(item.partition("=")[::2] for item in query.split("&") if item)
    return Path(path_part), options


DEFAULT_WRITER = "thread"
"""Where the writer connection lives unless the URL (``?writer=thread|process|auto``) or the
opener (``writer=``: the long-running commands choose ``auto``) says."""

Writer = ThreadConnection | ProcessWriter | AutoWriter


class SQLiteSession:
    """Named queries on one of the two connections, each (with its follow-ups) in one hop."""

    def __init__(self, conn: Writer, commit: bool = False) -> None:
        self._conn = conn
        self._commit = commit

    async def _op(self, op: str, *args: Any) -> Any:
        return await self._conn.op(op, *args)

    async def fetch(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Rows of ``query``, after its follow-up statements if it has any."""
        names, rows = await self._op("fetch", query, params or {}, self._commit)
        if rows and not isinstance(rows[0], sqlite3.Row):
            return [dict(zip(names, row, strict=True)) for row in rows]
        return rows  # type: ignore[no-any-return]

    async def fetch_table(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[Sequence[Any]]]:
        """Column names and rows of ``query`` (value sequences)."""
        names, rows = await self._op("fetch", query, params or {}, self._commit)
        return (names if rows else []), rows

    async def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Rows touched by ``query``."""
        return int(await self._op("execute", query, params or {}, self._commit))

    async def fetch_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[list[Row]]:
        """Run now (the file is local: nothing to save by waiting)."""
        return Later.now(await self.fetch(query, params))

    async def fetch_table_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[tuple[list[str], list[Sequence[Any]]]]:
        """Run now (the file is local: nothing to save by waiting)."""
        return Later.now(await self.fetch_table(query, params))

    async def fetch_each(
        self, queries: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> list[list[Row]]:
        """The rows of each query, in order (one hop each: the file is local)."""
        return [await self.fetch(query, params) for query, params in queries]

    async def lock_admission(self, relaxed: bool) -> None:
        """Nothing more to take: BEGIN IMMEDIATE already holds the file's one write lock."""

    async def commit_durably(self) -> None:
        """Nothing to do: admissions relax nothing on SQLite."""


class _WriteSession(SQLiteSession):
    """The session of :meth:`SQLiteDialect.write`: each statement (with its follow-ups) commits
    by itself, as on PostgreSQL, and BEGIN, the statement and COMMIT go to the writer in one
    hop. The event loop and the writer hand over once per write instead of three times, and
    the file's write lock is held for the statement alone, never across those hand-overs
    (each waits for the loop's turn)."""

    def __init__(self, dialect: SQLiteDialect, renewal: bool) -> None:
        super().__init__(dialect._writer, commit=True)
        self._dialect = dialect
        self._renewal = renewal

    async def _op(self, op: str, *args: Any) -> Any:
        return await self._dialect._commit_one(op, args, self._renewal)


class SQLiteDialect:
    """Tasks and events in one SQLite file: the embedded default."""

    name = "sqlite"
    push_notifications = False
    codec = CODEC
    orders_in_sql = False  # the claim and admit UPDATEs return rows unordered
    joins_in_order = False  # group_concat keeps no order SQLite promises (before 3.44)
    # One writer at a time: admit what the claim may take, then claim as always.
    admitting_claim = ("admit_for_claim", "claim")
    listen_interval_secs = 0.02
    """How often listeners look for commits while the file is busy..."""
    listen_idle_interval_secs = 0.1
    """...and once it has been quiet for ``listen_idle_after_secs``, to keep idle workers cheap."""
    listen_idle_after_secs = 2.0

    def __init__(
        self, url: str, *, busy_timeout_ms: int = 30_000, writer: str | None = None
    ) -> None:
        self.path, options = parse_sqlite_url(url)
        synchronous = options.get("synchronous", "FULL").upper()
        if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise InvalidInput("must be OFF, NORMAL, FULL or EXTRA", "db.synchronous")
        writer = options.get("writer", writer or DEFAULT_WRITER).lower()
        if writer not in WRITER_MODES:
            raise InvalidInput(f"must be thread, process or auto, not {writer!r}", "db.writer")
        self.writer_mode = writer
        # A worker tunes itself for a writer apart when it will have one while busy.
        self.separate_writer = writer != "thread"
        self._write_lock = asyncio.Lock()
        self._writer: Writer
        if writer == "auto":
            self._writer = AutoWriter(self.path, busy_timeout_ms, synchronous, self._write_lock)
        else:
            self._writer = (ProcessWriter if writer == "process" else ThreadConnection)(
                self.path, busy_timeout_ms, synchronous
            )
        self._reader = ThreadConnection(self.path, busy_timeout_ms, synchronous)
        self._own_commits = 0
        """Commits of this store's own writer (its listeners see them like any other)..."""
        self._lease_commits = 0
        """...of which bookkeeping (lease renewals, the worker's presence): the writes an idle
        process makes, which do not switch its own listeners to fast looking."""
        self._committing = 0
        """COMMITs of the writer under way and not yet counted."""

    @property
    def commits(self) -> int:
        """Transactions this process's writer has committed."""
        return self._own_commits

    async def open(self, wait_secs: float | None = None) -> None:
        """The file is created on first use; its folder must exist (``wait_secs`` is for
        servers: a file is there or not)."""
        if self.path.parent and not self.path.parent.exists():
            raise StoreError(f"the folder for the SQLite database does not exist: {self.path}")
        # A writer process starts now: it loads while this process goes on opening.
        await self._writer.ready()

    async def settled_number(self) -> int:
        """The highest number of a committed event: with one writer at a time, a write under
        way can only take higher ones, and none lower is taken again."""
        async with self.read() as s:
            return int((await s.fetch("numbers_drawn"))[0]["drawn"])

    async def close(self) -> None:
        """Close both connections."""
        await self._writer.close()
        await self._reader.close()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SQLiteSession]:
        """The reader connection, outside any transaction."""
        yield SQLiteSession(self._reader)

    @asynccontextmanager
    async def write(self, *, renewal: bool = False) -> AsyncIterator[SQLiteSession]:
        """The writer connection, each statement a transaction of its own (see _WriteSession)."""
        yield _WriteSession(self, renewal)

    async def _commit_one(self, op: str, args: tuple[Any, ...], renewal: bool) -> Any:
        """Run writer operation ``op`` as a transaction of its own, seen through, and count
        its commit.

        Such writes are handed to the writer as they come, without waiting for each other: the
        writer runs them in the order handed, each whole, so it goes from one to the next
        without waiting for the event loop's turn. Only an open transaction (and a migration)
        holds the write lock: a write waits for it to end, and is handed over at once when it
        has (no await in between), so it cannot land inside a transaction begun after it.
        """
        await self._writer.ready()
        while self._write_lock.locked():
            async with self._write_lock:
                pass
        job = self._writer.submit(op, args)
        # As in transaction: listeners leave a change they see meanwhile for their next look.
        self._committing += 1
        try:
            return await _seen_through(job)
        finally:
            if job.done() and not job.cancelled() and job.exception() is None:
                self._count_commit(renewal)
            self._committing -= 1

    async def _through(self, op: str, *args: Any) -> Any:
        """Writer operation ``op``, seen through: one handed to the writer runs to its end even
        if the awaiting task is cancelled, so the cancel waits for that end."""
        return await _seen_through(asyncio.ensure_future(self._writer.op(op, *args)))

    def _count_commit(self, renewal: bool) -> None:
        self._own_commits += 1
        if renewal:
            self._lease_commits += 1

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLiteSession]:
        """BEGIN IMMEDIATE ... COMMIT on the writer connection.

        A statement handed to the writer runs to its end even if the awaiting task
        is cancelled, so every step that opens or ends the transaction is seen through: a cancel
        during BEGIN must still be followed by a ROLLBACK, or the connection would stay inside a
        transaction and refuse every later write.
        """
        async with self._write_lock:
            begin = asyncio.ensure_future(self._writer.op("end", "BEGIN IMMEDIATE"))
            try:
                await asyncio.shield(begin)
            except asyncio.CancelledError:
                if await _settle(begin):
                    await self._end("ROLLBACK")
                raise
            try:
                yield SQLiteSession(self._writer)
            except BaseException:
                await self._end("ROLLBACK")
                raise
            # Listeners in this process leave a change they see while this commit is being
            # counted for their next look, so they never judge it before it is counted as ours.
            self._committing += 1
            try:
                await self._end("COMMIT")
                self._count_commit(renewal=False)
            finally:
                self._committing -= 1

    async def _end(self, statement: str) -> None:
        await self._through("end", statement)

    @asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notice]]:
        """A CHANNEL_CHANGED notice whenever another connection has committed.

        ``PRAGMA data_version`` changes when any other connection commits to the file; reading it
        takes no lock and a few microseconds, so it is read on the event loop: every
        ``listen_interval_secs`` while commits come, every ``listen_idle_interval_secs`` once the
        file has been quiet for a while (waking the loop 50 times a second costs an idle worker
        about 1% of a core).
        """
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise from_sqlite(exc) from exc

        def version() -> int:
            try:
                return int(conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise from_sqlite(exc) from exc

        # The baseline is read now, not at the first wait: a commit in between is heard.
        try:
            first = version()
        except BaseException:
            conn.close()
            raise
        own_at_open, renewals_at_open = self._own_commits, self._lease_commits

        async def notices() -> AsyncIterator[Notice]:
            last = first
            own, renewals = own_at_open, renewals_at_open
            loop = asyncio.get_running_loop()
            changed_at = loop.time()
            while True:
                quiet = loop.time() - changed_at > self.listen_idle_after_secs
                await asyncio.sleep(
                    self.listen_idle_interval_secs if quiet else self.listen_interval_secs
                )
                current = version()
                if current != last and not self._committing:
                    last = current
                    # Every change is announced. A change that may be only this process's own
                    # lease renewal does not switch to fast looking, so an idle worker stays
                    # idle; any other switches it.
                    mine = self._own_commits - own
                    if mine == 0 or mine != self._lease_commits - renewals:
                        changed_at = loop.time()
                    yield Notice(CHANNEL_CHANGED)
                own, renewals = self._own_commits, self._lease_commits

        try:
            yield notices()
        finally:
            conn.close()

    @asynccontextmanager
    async def snapshot(self, *queries: str) -> AsyncIterator[tuple[AsyncIterator[Row], ...]]:
        """The queries' rows from one read transaction on the reader connection."""
        await self._reader.run(lambda c: c.execute("BEGIN"))
        cursors: list[sqlite3.Cursor] = []
        try:
            cursors += [await self._reader.run(_cursor(Q[query])) for query in queries]

            async def rows(cursor: sqlite3.Cursor) -> AsyncIterator[Row]:
                while True:
                    batch = await self._reader.run(lambda c: cursor.fetchmany(2000))
                    if not batch:
                        return
                    for row in batch:
                        yield row

            yield tuple(rows(cursor) for cursor in cursors)
        finally:
            # A cursor left unread would keep the read transaction (and its old snapshot) open
            # past the COMMIT: close each first (verify may stop early, at max_breaks).
            def end(c: sqlite3.Connection) -> None:
                for cursor in cursors:
                    cursor.close()
                c.execute("COMMIT")

            await self._reader.run(end)

    # --- migrations -------------------------------------------------------------------------

    async def applied_versions(self) -> set[int]:
        """Versions recorded in aq_schema_version."""
        async with self._write_lock:
            return await self._through("applied_versions")  # type: ignore[no-any-return]

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration under the write lock unless another process did."""
        statements = _statements(migration.sql)
        async with self._write_lock:
            return await self._through(  # type: ignore[no-any-return]
                "apply_migration", migration.version, migration.name, statements
            )


def sqlite_store(url: str, *, busy_timeout_ms: int = 30_000, writer: str | None = None) -> SQLStore:
    """The store over one SQLite file; ``writer`` (thread or process) unless the URL says."""
    return SQLStore(SQLiteDialect(url, busy_timeout_ms=busy_timeout_ms, writer=writer))


def _cursor(statement: str) -> Callable[[sqlite3.Connection], sqlite3.Cursor]:
    return lambda c: c.execute(statement)


async def _seen_through(job: asyncio.Future[T]) -> T:
    """``job``'s result; a cancel while it runs waits for its end (it cannot be stopped)."""
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        await _settle(job)
        raise


async def _settle(job: asyncio.Future[Any]) -> bool:
    """Wait for a statement already on its way (it cannot be stopped); True if it succeeded."""
    try:
        await job
    except BaseException:
        return False
    return True


def _statements(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN ... END;) whole."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text and sqlite3.complete_statement(text):
            statements.append(text)
            current = []
    rest = "\n".join(current).strip()
    if rest and not all(ln.strip().startswith("--") or not ln.strip() for ln in current):
        statements.append(rest)
    return statements
