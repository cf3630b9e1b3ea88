"""The PostgreSQL dialect: psycopg 3, a connection pool, LISTEN, advisory locks, server-side
cursors. Only what differs from SQLite is here; the operations are in ``store/sql.py``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...domain.audit import installed_keys
from ...domain.errors import StoreUnavailable
from ..base import Later, NotArrived, Notice
from ..errors import from_postgres
from ..migrate import Migration
from ..rows import Codec, Row, load_json_text
from ..sql import SQLStore
from ..sqlfile import load_queries

Q = load_queries("postgres")

CODEC = Codec(
    time_out=lambda t: t.isoformat(),
    uuid_out=str,
    uuids_out=lambda ids: [str(i) for i in ids],
    json_out=lambda value: value,  # embedded as is in the JSON document
    # The array's text, read by the statement's ::uuid[] (hex digits are a UUID's input too).
    uuids_param=lambda ids: "{" + ",".join([i.hex for i in ids]) + "}",
)

PREPARED = frozenset(
    {
        # the hot set-wise statements
        "claim", "claim_room", "claim_admitting", "complete", "admit", "admit_ids", "insert_tasks",
        "apply", "heartbeat",
        "insert_logs",
        # reads and locks every loop makes
        "lock_tasks", "lock_lapsed", "lock_due_retries", "lock_tool_timeouts", "lock_tool_work",
        "lock_dependents_ready", "lock_expired_dead_letters", "find_by_idempotency",
        "find_live_by_source", "get_tasks", "list_tasks", "work_hints", "queued_p0",
        "active_load", "admission_candidates", "preemptible", "admission_room", "pending_tenants",
        "admission_lock", "fixed_plan", "fixed_plan_back",
        "list_schedules", "delete_schedule", "due_schedules", "advance_schedule",
        # every API request authenticates (cached for a few seconds per process)
        "token_by_prefix",
    }
)  # fmt: skip
"""Queries prepared on first use (the others once psycopg's threshold is reached)."""

FIXED_PLAN = frozenset({"admission_candidates"})
"""Queries planned once per connection, in a shape fixed beforehand (the fixed_plan query):
their plan for the values costs more than running them, and left to itself PostgreSQL plans
them afresh every time. Each is prepared on first use (PREPARED) and read held back."""

Connection = psycopg.AsyncConnection[DictRow]


class JsonLoader(Loader):
    """json and jsonb columns (text format) to Python values, as psycopg's own loader does
    with json.loads, only cheaper (see rows.load_json_text). In binary format a json value is
    the same text."""

    def load(self, data: Buffer) -> Any:
        """One value (the server sends UTF-8)."""
        return load_json_text(bytes(data).decode("utf-8", "surrogatepass"))


class JsonBinaryLoader(JsonLoader):
    """json columns in binary format: the text itself."""

    format = psycopg.pq.Format.BINARY


class JsonbBinaryLoader(Loader):
    """jsonb columns in binary format: a version byte (1, the only one PostgreSQL writes) and
    the text."""

    format = psycopg.pq.Format.BINARY

    def load(self, data: Buffer) -> Any:
        """One value."""
        raw = bytes(data)
        if raw[:1] != b"\x01":
            raise psycopg.DataError(f"jsonb in binary format of unknown version {raw[:1]!r}")
        return load_json_text(raw[1:].decode("utf-8", "surrogatepass"))


ADAPTERS = AdaptersMap(psycopg.adapters)
"""psycopg's adapters, with our loaders for json and jsonb in both formats: the pool's
connections use them."""
ADAPTERS.register_loader("json", JsonLoader)
ADAPTERS.register_loader("jsonb", JsonLoader)
ADAPTERS.register_loader("json", JsonBinaryLoader)
ADAPTERS.register_loader("jsonb", JsonbBinaryLoader)

BINARY = True
"""Answers come in PostgreSQL's binary format: the server formats no time, number or id as text
(a task row has ten times, each a number in binary and a formatted date in text) and psycopg
parses none back. A drain, `benchmarks/drain_ab.py` against text, three sittings of 3 rounds:
the server's CPU per task 0.97x, 0.98x and 0.98x, the rate 1.03x, 1.03x and 0.99x (benchmarks/
HISTORY.md, the fifteenth cut). The values are the same in either format (the store's tests
run in this one)."""


def _column_names(cur: psycopg.AsyncCursor[Any]) -> list[str]:
    """The names of the columns of ``cur``'s result, read from the result itself (psycopg's
    ``description`` builds an object per column, each time: a claim's 45 cost more than its
    rows)."""
    result = cur.pgresult
    if result is None:
        return []
    return [(result.fname(i) or b"").decode() for i in range(result.nfields)]


class _Answer:
    """Where a statement sent later leaves its answer: its rows (as dicts), or with ``table``
    its column names and rows as tuples (see fetch_table)."""

    def __init__(self, table: bool) -> None:
        self.table = table
        self.cursor: psycopg.AsyncCursor[Any] | None = None
        self.value: Any = None
        self.arrived = False

    def open(self, conn: Connection) -> psycopg.AsyncCursor[Any]:
        self.cursor = (
            conn.cursor(row_factory=tuple_row, binary=BINARY)
            if self.table
            else conn.cursor(binary=BINARY)
        )
        return self.cursor

    async def take(self) -> None:
        """Read the answer from the cursor, once the pipeline has brought it."""
        if self.cursor is None:
            return
        rows = list(await self.cursor.fetchall())
        if self.table:
            self.value = (_column_names(self.cursor), rows)
        else:
            self.value = rows
        self.arrived = True

    def read(self) -> Any:
        if not self.arrived:
            raise NotArrived("the statement's answer has not arrived: its transaction ended first")
        return self.value


Held = tuple[str, Mapping[str, Any] | None, _Answer | None]
"""A statement held back: its name, its parameters, and where its answer goes (None: nobody
reads it)."""


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Return once ``fd`` has something to read: one reader on the loop, no timer."""
    ready = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


class PostgresSession:
    """Named queries on one connection; driver errors leave it classified.

    Statements whose answer nothing waits for yet (a transaction's BEGIN, the admission lock, a
    claim whose tasks start only once the transaction has committed) are held back and sent
    ahead of the next statement, at the latest with the COMMIT, in one pipeline: a round trip
    each saved. The server still runs them in order, each statement with its own snapshot, so
    a count read after the admission lock sees every admission committed before the lock was
    taken."""

    def __init__(self, conn: Connection, ahead: Sequence[Held] = ()):
        self._conn = conn
        self._ahead: list[Held] = list(ahead)

    async def _run(
        self, query: str, params: Mapping[str, Any] | None, cur: psycopg.AsyncCursor[Any]
    ) -> psycopg.AsyncCursor[Any]:
        """Run ``query`` on ``cur``, after any statements held back (one round trip)."""
        if not self._ahead:
            await cur.execute(Q[query], params, prepare=query in PREPARED or None)
            return cur
        await self._pipelined([(cur, query, params)])
        return cur

    async def _pipelined(
        self, statements: Sequence[tuple[psycopg.AsyncCursor[Any], str, Mapping[str, Any] | None]]
    ) -> None:
        """Run the statements held back, then ``statements`` each on its cursor, in one
        pipeline: one round trip for all."""
        ahead, self._ahead = self._ahead, []
        # The pipeline's end (its sync) brings every answer back; each cursor keeps its own.
        async with self._conn.pipeline():
            for name, values, answer in ahead:
                if answer is None:
                    await self._conn.execute(
                        Q[name], values or None, prepare=name in PREPARED or None
                    )
                else:
                    cursor = answer.open(self._conn)
                    await cursor.execute(Q[name], values, prepare=name in PREPARED or None)
            for cur, query, params in statements:
                await cur.execute(Q[query], params, prepare=query in PREPARED or None)
        for _, _, answer in ahead:
            if answer is not None:
                await answer.take()

    async def _send(self) -> None:
        """Send what is held back now, if anything is."""
        if self._ahead:
            try:
                await self._pipelined([])
            except psycopg.Error as exc:
                raise from_postgres(exc) from exc

    async def fetch_each(
        self, queries: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> list[list[Row]]:
        """The rows of each query, run in order in one round trip."""
        try:
            cursors = [self._conn.cursor(binary=BINARY) for _ in queries]
            await self._pipelined(
                [
                    (cur, query, params)
                    for cur, (query, params) in zip(cursors, queries, strict=True)
                ]
            )
            return [list(await cur.fetchall()) for cur in cursors]
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc

    async def fetch(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Rows of ``query``."""
        try:
            cur = await self._run(query, params, self._conn.cursor(binary=BINARY))
            return list(await cur.fetchall())
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc

    async def fetch_table(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[Sequence[Any]]]:
        """Column names and rows (tuples) of ``query``."""
        try:
            cur = await self._run(
                query, params, self._conn.cursor(row_factory=tuple_row, binary=BINARY)
            )
            names = _column_names(cur)
            return names, list(await cur.fetchall())
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc

    def _hold(self, query: str, params: Mapping[str, Any] | None, table: bool) -> Later[Any]:
        """Hold ``query`` back until the next statement, at the latest the COMMIT (one of
        FIXED_PLAN between the statements that fix its plan and put the settings back)."""
        answer = _Answer(table)
        fixed = query in FIXED_PLAN
        if fixed:
            self._ahead.append(("fixed_plan", None, None))
        self._ahead.append((query, params, answer))
        if fixed:
            self._ahead.append(("fixed_plan_back", None, None))
        return Later(self._send, answer.read)

    async def fetch_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[list[Row]]:
        """Rows of ``query``, held back (see _hold)."""
        return self._hold(query, params, table=False)

    async def fetch_table_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[tuple[list[str], list[Sequence[Any]]]]:
        """Column names and rows of ``query``, held back (see _hold)."""
        return self._hold(query, params, table=True)

    async def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Rows touched by ``query``."""
        try:
            cur = await self._run(query, params, self._conn.cursor())
            return cur.rowcount
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc

    async def lock_admission(self, relaxed: bool) -> None:
        """A transaction-scoped advisory lock: one admitter under limits at a time; relaxed,
        the transaction's commit does not wait for the disk. Sent with the next statement
        (every admission reads what is admitted next, under the lock)."""
        self._ahead.append(("admission_lock", {"relaxed": relaxed}, None))

    async def commit_durably(self) -> None:
        """synchronous_commit back on, for this transaction: sent with the next statement or
        the COMMIT."""
        self._ahead.append(("commit_durably", None, None))

    async def end(self, commit: bool) -> None:
        """COMMIT, with what is still held back, or ROLLBACK, if a statement was run (or has
        an answer waiting). A transaction that ran nothing (a lock with no statement after it
        guards nothing) never sent its BEGIN, and ends without a round trip."""
        began = self._conn.info.transaction_status != pq.TransactionStatus.IDLE
        if commit and (began or any(a is not None for _, _, a in self._ahead)):
            try:
                await self.execute("commit")  # in one pipeline with what is held back
            except BaseException:
                # A statement that went with the COMMIT failed: the transaction is aborted,
                # and ends here (a connection that cannot roll back is dropped by the pool).
                if self._conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self.execute("rollback"))
                raise
            return
        self._ahead = []
        if began:
            await self.execute("rollback")


RECONNECT_SERIES_SECS = 2.0
"""How long one series of reconnection attempts lasts before the pool lets the next caller start
a new one."""
CONNECTION_WAIT_SECS = 3.0
"""How long an operation waits for a pooled connection before StoreUnavailable."""
SETTLE_WAIT_SECS = 10.0
"""How long the anchoring step waits for open transactions that write events to end."""


class PostgresDialect:
    """Tasks and events in PostgreSQL, shared by any number of processes and machines."""

    name = "postgres"
    push_notifications = True
    separate_writer = True
    codec = CODEC
    orders_in_sql = True
    joins_in_order = True
    # The room counted (a setting of the transaction), then one row update admitting and
    # claiming each pending task it takes.
    admitting_claim = ("claim_room", "claim_admitting")

    def __init__(
        self, url: str, *, min_size: int = 1, max_size: int = 10, wait_secs: float = 15.0
    ) -> None:
        self._url = url
        self._wait_secs = wait_secs
        self.commits = 0
        self._sizes = (min_size, max_size)
        self._pool = self._new_pool()

    def _new_pool(self) -> AsyncConnectionPool[Connection]:
        return AsyncConnectionPool(
            self._url,
            connection_class=Connection,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            kwargs={
                "row_factory": dict_row,
                "autocommit": True,
                "options": _options(),
                "context": ADAPTERS,
            },
            name="agentqueue",
            # While the server is away, each reconnection attempt backs off (1, 2, 4, 8 s...):
            # after a long outage the pool would find the server back only many seconds late.
            # A short series instead, started afresh by the next caller that waits, and a
            # bounded wait for a connection, so the loops that retry find it back within
            # about their own pause.
            reconnect_timeout=RECONNECT_SERIES_SECS,
            timeout=CONNECTION_WAIT_SECS,
        )

    async def open(self, wait_secs: float | None = None) -> None:
        """Open the pool. A permanent fault (no such database, a wrong password, a bad option)
        fails at once; a passing one is tried again for up to ``wait_secs``."""
        wait = self._wait_secs if wait_secs is None else wait_secs
        if self._pool.closed:
            self._pool = self._new_pool()  # a pool once closed cannot be opened again
        passing = await self._probe()
        try:
            await self._pool.open(wait=True, timeout=wait)
        except Exception as exc:  # the pool raises its own timeout type
            await self._pool.close()
            error = from_postgres(exc)
            if passing is not None and isinstance(error, StoreUnavailable):
                error = StoreUnavailable(f"{passing} (waited {wait:g} s)")
            raise error from None

    async def _probe(self) -> StoreUnavailable | None:
        """One direct connection, so that a fault waiting cannot mend is told at once (the pool
        would retry it until its timeout); a passing fault is returned for the pool to wait on."""
        try:
            conn = await psycopg.AsyncConnection.connect(self._url, connect_timeout=5)
        except psycopg.Error as exc:
            error = from_postgres(exc)
            if isinstance(error, StoreUnavailable):
                return error
            raise error from None
        await conn.close()
        return None

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; driver errors leave it classified."""
        try:
            async with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise from_postgres(exc) from exc

    @asynccontextmanager
    async def _autocommit(self, counted: bool = False) -> AsyncIterator[PostgresSession]:
        async with self._connection() as conn:
            yield PostgresSession(conn)
        if counted:
            self.commits += 1

    def read(self) -> AbstractAsyncContextManager[PostgresSession]:
        """A pooled connection."""
        return self._autocommit()

    def write(self, *, renewal: bool = False) -> AbstractAsyncContextManager[PostgresSession]:
        """A pooled connection: each statement commits by itself."""
        return self._autocommit(counted=True)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresSession]:
        """A transaction on a pooled connection. Its BEGIN goes with its first statement."""
        async with self._connection() as conn:
            session = PostgresSession(conn, [("begin", None, None)])
            try:
                yield session
            except BaseException:
                # A connection that cannot roll back is broken: the pool drops it (and rolls
                # back any connection handed back inside a transaction).
                with contextlib.suppress(Exception):
                    await asyncio.shield(session.end(commit=False))
                raise
            await session.end(commit=True)
        self.commits += 1

    async def settled_number(self) -> int:
        """The highest number of ``aq_event_gseq`` drawn, once every transaction that could
        hold a number up to it has ended.

        A transaction draws numbers only by inserting events, and an insert holds ROW EXCLUSIVE
        on ``aq_events`` from before its first number until its transaction ends. So: read the
        sequence, then the transactions holding that lock, and wait for those to end. One that
        took the lock later can only draw higher numbers. Nothing is locked here: writers never
        queue behind the anchoring step, however long one of them stays open."""
        async with self._autocommit() as s:
            drawn = int((await s.fetch("numbers_drawn"))[0]["drawn"])
            writers = [r["vxid"] for r in await s.fetch("event_writers")]
            pause, started = 0.002, time.monotonic()
            while writers:
                if time.monotonic() - started > SETTLE_WAIT_SECS:
                    raise StoreUnavailable(
                        f"anchoring waited {SETTLE_WAIT_SECS:g} s for {len(writers)} "
                        "transaction(s) that write events to end; tried again later"
                    )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.1)
                rows = await s.fetch("event_writers_left", {"vxids": writers})
                writers = [r["vxid"] for r in rows]
        return drawn

    @asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notice]]:
        """LISTEN on a connection of its own, outside the pool, for as long as the context."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._url, autocommit=True, connect_timeout=5
            )
        except psycopg.Error as exc:
            raise from_postgres(exc) from None
        try:
            for channel in channels:
                await conn.execute(sql.SQL(Q["listen"]).format(channel=sql.Identifier(channel)))

            async def notices() -> AsyncIterator[Notice]:
                loop = asyncio.get_running_loop()
                try:
                    while True:
                        # What has arrived (with what came during the LISTENs), without a wait:
                        # psycopg's own wait wakes every 0.1 s to look for a Ctrl-C, ten times
                        # a second for nothing in an asyncio task, which is cancelled without
                        # it. Then wait for the socket alone (EOF too, when the server goes).
                        async for note in conn.notifies(timeout=0):
                            yield Notice(note.channel, note.payload)
                        await _readable(loop, conn.fileno())
                except psycopg.Error as exc:
                    raise from_postgres(exc) from exc

            yield notices()
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc
        finally:
            await conn.close()

    @asynccontextmanager
    async def snapshot(self, *queries: str) -> AsyncIterator[tuple[AsyncIterator[Row], ...]]:
        """The queries' rows through server-side cursors in one REPEATABLE READ snapshot."""
        async with self._connection() as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            try:
                async with conn.transaction():
                    cursors = [conn.cursor(name=f"aq_{query}") for query in queries]
                    for cursor, query in zip(cursors, queries, strict=True):
                        await cursor.execute(Q[query])

                    async def rows(
                        cursor: psycopg.AsyncServerCursor[DictRow],
                    ) -> AsyncIterator[Row]:
                        try:
                            async for row in cursor:
                                yield row
                        except psycopg.Error as exc:
                            raise from_postgres(exc) from exc

                    yield tuple(rows(cursor) for cursor in cursors)
                    for cursor in cursors:
                        await cursor.close()
            finally:
                await conn.set_isolation_level(None)

    # --- migrations -------------------------------------------------------------------------

    async def applied_versions(self) -> set[int]:
        """Versions recorded in aq_schema_version."""
        async with self._connection() as conn:
            # CREATE TABLE IF NOT EXISTS is not safe against a concurrent creator (both pass the
            # check, one fails on pg_type): create it under the migration lock.
            async with conn.transaction():
                await conn.execute(Q["migration_lock"])
                await conn.execute(Q["create_version_table"])
            cur = await conn.execute(Q["applied_versions"])
            return {row["version"] for row in await cur.fetchall()}

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration unless a concurrent migrator already did."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute(Q["migration_lock"])
            cur = await conn.execute(Q["applied_versions"])
            if migration.version in {row["version"] for row in await cur.fetchall()}:
                return False
            await conn.execute(migration.sql.encode())
            await conn.execute(
                Q["record_version"], {"version": migration.version, "name": migration.name}
            )
            return True


def _options() -> str:
    """Each connection's start-up settings: UTC, and the audit key of this process (R24) as
    ``aq_event_hash`` reads it. A start-up option, not a statement, so it is in no statement
    log."""
    options = "-c TimeZone=UTC"
    key = installed_keys().current
    if key is not None:
        options += f" -c agentqueue.audit_key={key.setting()}"
    return options


def postgres_store(url: str, *, min_size: int = 1, max_size: int = 10) -> SQLStore:
    """The store over one PostgreSQL database."""
    return SQLStore(PostgresDialect(url, min_size=min_size, max_size=max_size))
