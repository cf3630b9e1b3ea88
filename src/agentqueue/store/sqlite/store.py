"""The SQLite store: one file in WAL mode, writes under BEGIN IMMEDIATE, a busy timeout.

sqlite3 is synchronous, so each connection lives on its own thread and async callers hop to it.
One connection writes (transactions are serialised in-process by a lock and across processes by
SQLite's write lock); another reads, which WAL lets run beside the writer.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID, uuid4

from ...domain.audit import StoredEvent, chain_hash
from ...domain.errors import InvalidInput, StoreError
from ...domain.models import Event, LogRecord, Task
from ...domain.priority import order_key
from ...domain.schedule import CatchUp, Schedule
from ...domain.states import BulkEvent, TaskState
from ..base import (
    CHANNEL_CHANGED,
    AuditSnapshot,
    Bucket,
    Candidate,
    Change,
    DedupKey,
    DeliveryResult,
    LeaderInfo,
    Lease,
    LoadRow,
    NewTask,
    Notice,
    OutboxItem,
    OutboxRow,
    PausedType,
    Purge,
    TaskFilter,
    TaskHead,
    WorkHints,
)
from ..errors import from_sqlite
from ..migrate import Migration, latest_version, refuse_newer, run_migrations
from ..rows import (
    Codec,
    change_rows,
    delivery_rows,
    event_from_row,
    event_rows,
    log_from_row,
    log_rows,
    new_task_rows,
    outbox_from_row,
    outbox_rows,
    purge_rows,
    stored_event_from_row,
    task_from_row,
    task_head_from_row,
)
from ..sqlfile import load_queries

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
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def register_functions(conn: sqlite3.Connection) -> None:
    """The domain's audit hash and a UUID maker, for the set-wise hot transitions."""
    conn.create_function("aq_event_hash", 5, chain_hash, deterministic=True)
    conn.create_function("aq_uuid", 0, lambda: str(uuid4()))


def _json_in(value: str | None) -> Any:
    return None if value is None else json.loads(value)


CODEC = Codec(
    time_out=to_micros,
    time_in=from_micros,
    uuid_out=lambda u: None if u is None else str(u),
    uuid_in=lambda s: None if s is None else UUID(s),
    uuids_out=lambda ids: json.dumps([str(i) for i in ids]),
    uuids_in=lambda text: tuple(UUID(s) for s in json.loads(text)),
    json_in=_json_in,
    native=False,
)


def _dump(rows: Any) -> str:
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False)


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


class _Conn:
    """A sqlite3 connection pinned to one thread."""

    def __init__(self, path: Path, busy_timeout_ms: int, synchronous: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentqueue-sqlite")
        self._path = path
        self._busy = busy_timeout_ms
        self._sync = synchronous
        self.conn: sqlite3.Connection | None = None

    def _open(self) -> None:
        conn = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, timeout=self._busy / 1000
        )
        try:
            conn.row_factory = sqlite3.Row
            register_functions(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy)}")
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self._sync}")
        except BaseException:
            conn.close()
            raise
        self.conn = conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        # Turning a new file to WAL takes an exclusive lock, and while another process opens the
        # same new file SQLite answers "database is locked" at once, without the busy handler:
        # wait for it here, up to the busy timeout.
        deadline = time.monotonic() + self._busy / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()

        def call() -> T:
            try:
                if self.conn is None:
                    self._open()
                assert self.conn is not None
                return fn(self.conn)
            except sqlite3.Error as exc:
                raise from_sqlite(exc) from exc

        return await loop.run_in_executor(self._executor, call)

    async def close(self) -> None:
        if self.conn is not None:
            await self.run(lambda c: c.close())
            self.conn = None
        self._executor.shutdown(wait=True)


def _tasks(conn: sqlite3.Connection, query: str, params: dict[str, Any]) -> list[Task]:
    return [task_from_row(row, CODEC) for row in conn.execute(Q[query], params).fetchall()]


def _admit(
    c: sqlite3.Connection,
    limit: int,
    now: datetime,
    aging_secs: float,
    event: BulkEvent,
    paused: Sequence[str] = (),
) -> list[UUID]:
    """ADMIT the best ``limit`` admissible tasks and record their events; ids in that order."""
    params = {
        "paused": _dump(list(paused)),
        "limit": limit,
        "now": to_micros(now),
        "aging_us": max(1, int(aging_secs * 1_000_000)),
        "tail": event.tail,
    }
    rows = c.execute(Q["admit"], params).fetchall()
    if not rows:
        return []
    ids = [row["id"] for row in rows]
    c.execute(
        Q["admit_events"],
        {"ids": _dump(ids), "now": params["now"], "actor": event.actor, "data": event.data_text},
    )
    rows.sort(
        key=lambda r: order_key(
            r["priority"],
            _EPOCH + timedelta(microseconds=r["eligible_at"]),
            r["seq"],
            now,
            aging_secs,
        )
    )
    return [UUID(row["id"]) for row in rows]


class SQLiteTx:
    """Statements inside one BEGIN IMMEDIATE transaction; the write lock is already held."""

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn

    async def lock(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """The tasks with these ids."""
        params = {"ids": _dump([str(i) for i in ids]), "tenant": tenant}
        return await self._conn.run(lambda c: _tasks(c, "lock_tasks", params))

    async def lock_lapsed(self, limit: int, now: datetime) -> list[Task]:
        """Executing tasks whose lease ran out."""
        params = {"limit": limit, "now": to_micros(now)}
        return await self._conn.run(lambda c: _tasks(c, "lock_lapsed", params))

    async def lock_due_retries(self, limit: int, now: datetime) -> list[Task]:
        """Retrying tasks whose backoff elapsed."""
        params = {"limit": limit, "now": to_micros(now)}
        return await self._conn.run(lambda c: _tasks(c, "lock_due_retries", params))

    async def insert_logs(self, records: Sequence[LogRecord]) -> None:
        """Bulk insert of captured output."""
        if records:
            rows = _dump(log_rows(records, CODEC))
            await self._conn.run(lambda c: c.execute(Q["insert_logs"], {"rows": rows}))

    async def notify(self, channel: str, payload: str = "") -> None:
        """Nothing to do: listeners see every commit through PRAGMA data_version."""

    async def apply(self, changes: Sequence[Change]) -> set[UUID]:
        """Guarded bulk update, then the events of the rows written."""
        if not changes:
            return set()
        rows = _dump(change_rows(changes, CODEC))
        events = _dump(event_rows([ch.event for ch in changes], CODEC))

        def run(c: sqlite3.Connection) -> set[UUID]:
            written = [row[0] for row in c.execute(Q["apply"], {"rows": rows}).fetchall()]
            c.execute(Q["insert_events"], {"rows": events, "written": _dump(written)})
            return {UUID(i) for i in written}

        return await self._conn.run(run)

    async def lock_admission(self) -> None:
        """Nothing more to take: BEGIN IMMEDIATE already holds the file's one write lock."""

    async def active_load(self) -> list[LoadRow]:
        """Queued and executing tasks, grouped."""

        def run(c: sqlite3.Connection) -> list[LoadRow]:
            return [LoadRow(r["tenant"], r["agent"], r["n"]) for r in c.execute(Q["active_load"])]

        return await self._conn.run(run)

    async def admission_candidates(
        self,
        now: datetime,
        tenants: Sequence[str],
        per_tenant: int,
        skip_types: Sequence[str] = (),
        paused: Sequence[str] = (),
    ) -> list[Candidate]:
        """The heads of the tenants' priority levels."""
        params = {
            "now": to_micros(now),
            "tenants": _dump(list(tenants)),
            "per_tenant": per_tenant,
            "paused": _dump(list(paused)),
            "skip_types": _dump(list(skip_types)),
        }

        def run(c: sqlite3.Connection) -> list[Candidate]:
            return [
                Candidate(
                    UUID(r["id"]),
                    r["tenant"],
                    r["task_type"],
                    r["assignee"],
                    r["priority"],
                    from_micros(r["eligible_at"]),  # type: ignore[arg-type]
                    r["seq"],
                    r["kind"],
                    tuple(json.loads(r["labels"])),
                )
                for r in c.execute(Q["admission_candidates"], params)
            ]

        return await self._conn.run(run)

    async def rate_buckets(self, names: Sequence[str]) -> dict[str, Bucket]:
        """Stored buckets (the write lock already keeps them ours)."""
        params = {"names": _dump(list(names))}

        def run(c: sqlite3.Connection) -> dict[str, Bucket]:
            return {
                r["name"]: Bucket(r["tokens"], from_micros(r["updated_at"]))  # type: ignore[arg-type]
                for r in c.execute(Q["rate_buckets"], params)
            }

        return await self._conn.run(run)

    async def save_rate_buckets(self, buckets: Mapping[str, Bucket]) -> None:
        """Upsert."""
        if buckets:
            rows = _dump(
                [
                    {"name": n, "tokens": b.tokens, "updated_at": to_micros(b.updated_at)}
                    for n, b in buckets.items()
                ]
            )
            await self._conn.run(lambda c: c.execute(Q["save_rate_buckets"], {"rows": rows}))

    async def admit_ids(
        self, ids: Sequence[UUID], now: datetime, event: BulkEvent, agent: str | None = None
    ) -> list[UUID]:
        """Update the chosen rows still pending, then record their events."""
        if not ids:
            return []
        params = {
            "ids": _dump([str(i) for i in ids]),
            "now": to_micros(now),
            "tail": event.tail,
            "agent": agent,
        }

        def run(c: sqlite3.Connection) -> set[UUID]:
            written = [row[0] for row in c.execute(Q["admit_ids"], params).fetchall()]
            if written:
                c.execute(
                    Q["admit_events"],
                    {"ids": _dump(written), "now": params["now"], "actor": event.actor,
                     "data": event.data_text},
                )  # fmt: skip
            return {UUID(i) for i in written}

        admitted = await self._conn.run(run)
        return [i for i in ids if i in admitted]

    async def preemptible(self, before: datetime, min_priority: int) -> dict[str, int]:
        """One grouped count."""
        params = {"before": to_micros(before), "min_priority": min_priority}

        def run(c: sqlite3.Connection) -> dict[str, int]:
            return {r["agent"]: int(r["n"]) for r in c.execute(Q["preemptible"], params)}

        return await self._conn.run(run)

    async def note_waiting(self, reasons: Mapping[UUID, str], until: datetime) -> None:
        """One statement for all."""
        if reasons:
            params = {
                "rows": _dump([{"id": str(i), "reason": r} for i, r in reasons.items()]),
                "until": to_micros(until),
            }
            await self._conn.run(lambda c: c.execute(Q["note_waiting"], params))

    async def active_count(self) -> int:
        """Queued plus executing tasks."""
        return await self._conn.run(lambda c: int(c.execute(Q["active_count"]).fetchone()[0]))

    async def pending_tenants(self, limit: int) -> list[str]:
        """Tenants with pending tasks."""
        params = {"limit": limit}
        return await self._conn.run(
            lambda c: [r[0] for r in c.execute(Q["pending_tenants"], params)]
        )

    async def admit_next(
        self,
        limit: int,
        now: datetime,
        aging_secs: float,
        event: BulkEvent,
        paused: Sequence[str] = (),
    ) -> list[UUID]:
        """The store's ADMIT, inside this transaction."""
        return await self._conn.run(lambda c: _admit(c, limit, now, aging_secs, event, paused))

    async def lock_tool_timeouts(self, now: datetime, limit: int) -> list[Task]:
        """Waiting tasks past their tool deadline."""
        params = {"now": to_micros(now), "limit": limit}
        return await self._conn.run(lambda c: _tasks(c, "lock_tool_timeouts", params))

    async def lock_tool_work(self, names: Sequence[str], now: datetime, limit: int) -> list[Task]:
        """Waiting tasks with a call these tools can take."""
        params = {"names": _dump(list(names)), "now_ts": now.timestamp(), "limit": limit}
        return await self._conn.run(lambda c: _tasks(c, "lock_tool_work", params))

    async def set_tool_calls(self, task: Task, tool_calls: Sequence[Any]) -> bool:
        """Guarded by state and audit position."""
        params = {
            "id": str(task.id),
            "expected_seq": task.event_seq,
            "tool_calls": _dump(list(tool_calls)),
        }
        row = await self._conn.run(lambda c: c.execute(Q["set_tool_calls"], params).fetchone())
        return row is not None

    async def lock_dependents_ready(self, limit: int) -> list[Task]:
        """Held tasks whose dependencies settled."""
        return await self._conn.run(lambda c: _tasks(c, "lock_dependents_ready", {"limit": limit}))

    async def task_states(self, ids: Sequence[UUID]) -> dict[UUID, TaskState]:
        """States by id."""
        params = {"ids": _dump([str(i) for i in ids])}

        def run(c: sqlite3.Connection) -> dict[UUID, TaskState]:
            return {
                UUID(r["id"]): TaskState(r["state"]) for r in c.execute(Q["task_states"], params)
            }

        return await self._conn.run(run)

    # --- Dead letter retention and alerts ---------------------------------------------------

    async def enqueue_outbox(self, items: Sequence[OutboxItem]) -> int:
        """Insert the deliveries not already stored."""
        if not items:
            return 0
        rows = _dump(outbox_rows(items, CODEC))
        return await self._conn.run(
            lambda c: len(c.execute(Q["enqueue_outbox"], {"rows": rows}).fetchall())
        )

    async def lease_outbox(
        self, kind: str, now: datetime, limit: int, until: datetime
    ) -> list[OutboxRow]:
        """Pick due deliveries and push them to ``until`` in one statement."""
        params = {"kind": kind, "now": to_micros(now), "limit": limit, "until": to_micros(until)}

        def run(c: sqlite3.Connection) -> list[OutboxRow]:
            rows = c.execute(Q["lease_outbox"], params).fetchall()
            return sorted((outbox_from_row(r, CODEC) for r in rows), key=lambda r: r.id)

        return await self._conn.run(run)

    async def record_deliveries(self, results: Sequence[DeliveryResult]) -> None:
        """Record tries in one statement."""
        if results:
            rows = _dump(delivery_rows(results, CODEC))
            await self._conn.run(lambda c: c.execute(Q["record_deliveries"], {"rows": rows}))

    async def lock_expired_dead_letters(
        self, limit: int, p0_before: datetime, other_before: datetime
    ) -> list[Task]:
        """Dead letters past retention (the write lock is already held)."""
        params = {
            "limit": limit,
            "p0_before": to_micros(p0_before),
            "other_before": to_micros(other_before),
            "latest": to_micros(max(p0_before, other_before)),
        }
        return await self._conn.run(lambda c: _tasks(c, "lock_expired_dead_letters", params))

    async def purge(self, items: Sequence[Purge]) -> set[UUID]:
        """Guarded delete, then the last events and the logs of the rows deleted."""
        if not items:
            return set()
        rows = _dump(purge_rows(items, CODEC))
        events = _dump(event_rows([p.event for p in items], CODEC))

        def run(c: sqlite3.Connection) -> set[UUID]:
            gone = [row[0] for row in c.execute(Q["purge_tasks"], {"rows": rows}).fetchall()]
            if gone:
                ids = _dump(gone)
                c.execute(Q["insert_events"], {"rows": events, "written": ids})
                c.execute(Q["purge_logs"], {"ids": ids})
            return {UUID(i) for i in gone}

        return await self._conn.run(run)


class SQLiteStore:
    """Tasks and events in one SQLite file: the embedded default."""

    dialect = "sqlite"
    push_notifications = False
    listen_interval_secs = 0.02
    """How often listeners look for commits while the file is busy..."""
    listen_idle_interval_secs = 0.1
    """...and once it has been quiet for ``listen_idle_after_secs``, to keep idle workers cheap."""
    listen_idle_after_secs = 2.0

    def __init__(self, url: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path, options = parse_sqlite_url(url)
        synchronous = options.get("synchronous", "FULL").upper()
        if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise InvalidInput("must be OFF, NORMAL, FULL or EXTRA", "db.synchronous")
        self._writer = _Conn(self.path, busy_timeout_ms, synchronous)
        self._reader = _Conn(self.path, busy_timeout_ms, synchronous)
        self._write_lock = asyncio.Lock()
        self._own_commits = 0
        """Commits of this store's own writer (its listeners see them like any other)..."""
        self._lease_commits = 0
        """...of which lease renewals: the one write an idle process makes."""

    @property
    def commits(self) -> int:
        """Transactions this store has committed (a command that met a lock is run again only
        when none of its writes was saved)."""
        return self._own_commits

    async def open(self, *, migrate: bool = True, wait_secs: float | None = None) -> None:
        """Create the file if needed and migrate; refuse a schema newer than this release.
        (``wait_secs`` is for servers; a file is there or not.)"""
        if self.path.parent and not self.path.parent.exists():
            raise StoreError(f"the folder for the SQLite database does not exist: {self.path}")
        version = await self.schema_version()
        refuse_newer(version, self.dialect)
        if migrate and version < latest_version(self.dialect):
            await self.migrate()

    async def close(self) -> None:
        """Close both connections."""
        await self._writer.close()
        await self._reader.close()

    # --- migrations -------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply missing migrations."""
        return await run_migrations(self, self.dialect)

    async def applied_versions(self) -> set[int]:
        """Versions recorded in aq_schema_version."""

        def run(c: sqlite3.Connection) -> set[int]:
            c.execute(Q["create_version_table"])
            return {row[0] for row in c.execute(Q["applied_versions"])}

        async with self._write_lock:
            return await self._writer.run(run)

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration under the write lock unless another process did."""

        def run(c: sqlite3.Connection) -> bool:
            c.execute("BEGIN IMMEDIATE")
            try:
                if migration.version in {row[0] for row in c.execute(Q["applied_versions"])}:
                    c.execute("ROLLBACK")
                    return False
                for statement in _statements(migration.sql):
                    c.execute(statement)
                c.execute(
                    Q["record_version"], {"version": migration.version, "name": migration.name}
                )
                c.execute("COMMIT")
                return True
            except BaseException:
                c.execute("ROLLBACK")
                raise

        async with self._write_lock:
            return await self._writer.run(run)

    async def schema_version(self) -> int:
        """The highest applied migration, 0 on a new file."""
        return max(await self.applied_versions(), default=0)

    # --- writes -----------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLiteTx]:
        """BEGIN IMMEDIATE ... COMMIT on the writer connection.

        A statement handed to the connection's thread runs to its end even if the awaiting task
        is cancelled, so every step that opens or ends the transaction is seen through: a cancel
        during BEGIN must still be followed by a ROLLBACK, or the connection would stay inside a
        transaction and refuse every later write.
        """
        async with self._write_lock:
            begin = asyncio.ensure_future(self._writer.run(lambda c: c.execute("BEGIN IMMEDIATE")))
            try:
                await asyncio.shield(begin)
            except asyncio.CancelledError:
                if await _settle(begin):
                    await self._end("ROLLBACK")
                raise
            try:
                yield SQLiteTx(self._writer)
            except BaseException:
                await self._end("ROLLBACK")
                raise
            await self._end("COMMIT")
            self._own_commits += 1

    async def _end(self, statement: str) -> None:
        job = asyncio.ensure_future(self._writer.run(lambda c: c.execute(statement)))
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            await _settle(job)
            raise

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Insert what does not conflict, with creation events, in one transaction."""
        if not new:
            return {}
        rows = _dump(new_task_rows(new, CODEC))
        events = _dump(event_rows([e for n in new for e in n.events], CODEC))

        def run(c: sqlite3.Connection) -> dict[UUID, int]:
            written = {row[0]: row[1] for row in c.execute(Q["insert_tasks"], {"rows": rows})}
            c.execute(Q["insert_events"], {"rows": events, "written": _dump(list(written))})
            return {UUID(i): seq for i, seq in written.items()}

        async with self.transaction():
            return await self._writer.run(run)

    async def heartbeat(
        self, leases: Sequence[Lease], now: datetime, ttl_secs: float, grace_secs: float
    ) -> set[UUID]:
        """Extend the leases whose token still holds."""
        if not leases:
            return set()
        params = {
            "rows": _dump([{"id": str(x.task_id), "token": str(x.lock_token)} for x in leases]),
            "now": to_micros(now),
            "ttl_us": int(ttl_secs * 1_000_000),
            "grace_us": int(grace_secs * 1_000_000),
        }
        async with self.transaction():
            rows = await self._writer.run(lambda c: c.execute(Q["heartbeat"], params).fetchall())
        return {UUID(row[0]) for row in rows}

    # --- the set-wise hot transitions (domain.states.BULK_ACTIONS) ---------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self.transaction():
            return await self._writer.run(fn)

    async def claim(
        self,
        limit: int,
        task_types: Sequence[str] | None,
        now: datetime,
        aging_secs: float,
        ttl_secs: float,
        grace_secs: float,
        event: BulkEvent,
        paused: Sequence[str] = (),
        agents: Sequence[str] | None = None,
    ) -> list[Task]:
        """Update the picked rows, then record their events from the rows as written."""
        worker = event.actor
        params = {
            "paused": _dump(list(paused)),
            "limit": limit,
            "task_types": _dump(list(task_types)) if task_types is not None else None,
            "agents": _dump(list(agents)) if agents is not None else None,
            "now": to_micros(now),
            "aging_us": max(1, int(aging_secs * 1_000_000)),
            "worker": worker,
            "ttl_us": int(ttl_secs * 1_000_000),
            "grace_us": int(grace_secs * 1_000_000),
            "tail": event.tail,
        }

        def run(c: sqlite3.Connection) -> list[Task]:
            tasks = [task_from_row(row, CODEC) for row in c.execute(Q["claim"], params)]
            if tasks:
                ids = _dump([str(t.id) for t in tasks])
                c.execute(
                    Q["claim_events"],
                    {"ids": ids, "now": params["now"], "worker": worker, "data": event.data_text},
                )
            return sorted(tasks, key=lambda t: order_key(t.priority, t.eligible_at, t.seq, now,
                                                          aging_secs))  # fmt: skip

        return await self._write(run)

    async def admit(
        self,
        limit: int,
        now: datetime,
        aging_secs: float,
        event: BulkEvent,
        paused: Sequence[str] = (),
    ) -> list[UUID]:
        """Update the picked rows, then record their events."""
        return await self._write(lambda c: _admit(c, limit, now, aging_secs, event, paused))

    async def complete(
        self,
        items: Sequence[tuple[UUID, UUID, Any]],
        now: datetime,
        event: BulkEvent,
        wake_scheduler: bool = False,
    ) -> dict[UUID, tuple[int, str]]:
        """Complete the rows whose lease holds, then record their events (listeners see the
        commit, so ``wake_scheduler`` needs nothing more here)."""
        if not items:
            return {}
        rows = _dump(
            [{"id": str(i), "token": str(t), "result": CODEC.json_out(r)} for i, t, r in items]
        )
        at = to_micros(now)

        def run(c: sqlite3.Connection) -> dict[UUID, tuple[int, str]]:
            params = {"rows": rows, "now": at, "tail": event.tail}
            done = c.execute(Q["complete"], params).fetchall()
            if done:
                ids = _dump([row["id"] for row in done])
                c.execute(
                    Q["complete_events"],
                    {"ids": ids, "now": at, "actor": event.actor, "data": event.data_text},
                )
            return {UUID(row["id"]): (row["event_seq"], row["last_hash"]) for row in done}

        return await self._write(run)

    # --- reads ------------------------------------------------------------------------------

    async def _read(self, query: str, params: dict[str, Any]) -> list[Task]:
        return await self._reader.run(lambda c: _tasks(c, query, params))

    async def find_existing(self, keys: Sequence[DedupKey]) -> list[Task]:
        """Tasks sharing an idempotency key, or live tasks sharing a source key."""
        by_key = [{"tenant": k.tenant, "key": k.idempotency_key} for k in keys if k.idempotency_key]
        by_source = [
            {"tenant": k.tenant, "source": k.source, "source_id": k.source_id}
            for k in keys
            if k.source_id is not None
        ]
        found: dict[UUID, Task] = {}
        if by_key:
            for task in await self._read("find_by_idempotency", {"keys": _dump(by_key)}):
                found[task.id] = task
        if by_source:
            for task in await self._read("find_live_by_source", {"keys": _dump(by_source)}):
                found[task.id] = task
        return list(found.values())

    async def get_tasks(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """Tasks by id."""
        return await self._read(
            "get_tasks", {"ids": _dump([str(i) for i in ids]), "tenant": tenant}
        )

    async def list_tasks(self, flt: TaskFilter) -> list[Task]:
        """Filtered, newest first."""
        params = {
            "tenant": flt.tenant,
            "states": _dump([s.value for s in flt.states]) if flt.states else None,
            "task_types": _dump(list(flt.task_types)) if flt.task_types else None,
            "sources": _dump(list(flt.sources)) if flt.sources else None,
            "before_seq": flt.before_seq,
            "limit": flt.limit,
        }
        return await self._read("list_tasks", params)

    async def events(self, task_id: UUID, tenant: str | None = None) -> list[Event]:
        """One task's events in order."""
        params = {"task_id": str(task_id), "tenant": tenant}

        def run(c: sqlite3.Connection) -> list[Event]:
            return [event_from_row(row, CODEC) for row in c.execute(Q["events"], params)]

        return await self._reader.run(run)

    async def work_hints(self, now: datetime) -> WorkHints:
        """One read on the reader connection: no write lock."""
        params = {"now": to_micros(now)}

        def run(c: sqlite3.Connection) -> WorkHints:
            row = c.execute(Q["work_hints"], params).fetchone()
            return WorkHints(*(bool(v) for v in row))  # in the order of the query's columns

        return await self._reader.run(run)

    async def queued_p0(self, limit: int = 100) -> list[tuple[str | None, str]]:
        """One read on the reader connection."""

        def run(c: sqlite3.Connection) -> list[tuple[str | None, str]]:
            rows = c.execute(Q["queued_p0"], {"limit": limit})
            return [(r["agent"], r["task_type"]) for r in rows]

        return await self._reader.run(run)

    async def logs(self, task_id: UUID, tenant: str | None = None) -> list[LogRecord]:
        """Captured output of one task."""
        params = {"task_id": str(task_id), "tenant": tenant}

        def run(c: sqlite3.Connection) -> list[LogRecord]:
            return [log_from_row(row, CODEC) for row in c.execute(Q["logs"], params)]

        return await self._reader.run(run)

    async def notify(self, channel: str, payload: str = "") -> None:
        """Nothing to do: listeners see every commit through PRAGMA data_version."""

    @asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notice]]:
        """A CHANNEL_CHANGED notice whenever another connection has committed.

        ``PRAGMA data_version`` changes when any other connection commits to the file; reading it
        takes no lock and a few microseconds, so it is read on the event loop: every
        ``listen_interval_secs`` while commits come, every ``listen_idle_interval_secs`` once the
        file has been quiet for a while (waking the loop 50 times a second costs an idle worker
        about 1% of a core).
        """
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

        def version() -> int:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])

        async def notices() -> AsyncIterator[Notice]:
            last = version()
            own, renewals = self._own_commits, self._lease_commits
            loop = asyncio.get_running_loop()
            changed_at = loop.time()
            while True:
                quiet = loop.time() - changed_at > self.listen_idle_after_secs
                await asyncio.sleep(
                    self.listen_idle_interval_secs if quiet else self.listen_interval_secs
                )
                current = version()
                if current != last:
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

    async def count_parked(self, now: datetime, tenant: str | None = None) -> int:
        """One count on the reader connection."""
        params = {"now": to_micros(now), "tenant": tenant}
        return await self._reader.run(
            lambda c: int(c.execute(Q["count_parked"], params).fetchone()[0])
        )

    async def count_by_state(self, tenant: str | None = None) -> dict[TaskState, int]:
        """Counts per state."""

        def run(c: sqlite3.Connection) -> dict[TaskState, int]:
            rows = c.execute(Q["count_by_state"], {"tenant": tenant}).fetchall()
            return {TaskState(row["state"]): row["count"] for row in rows}

        return await self._reader.run(run)

    @asynccontextmanager
    async def audit_snapshot(self) -> AsyncIterator[AuditSnapshot]:
        """Heads and events from one read transaction on the reader connection."""
        await self._reader.run(lambda c: c.execute("BEGIN"))
        try:
            heads_cur = await self._reader.run(lambda c: c.execute(Q["task_heads"]))
            events_cur = await self._reader.run(lambda c: c.execute(Q["all_events"]))

            async def rows(cursor: sqlite3.Cursor) -> AsyncIterator[sqlite3.Row]:
                while True:
                    batch = await self._reader.run(lambda c: cursor.fetchmany(2000))
                    if not batch:
                        return
                    for row in batch:
                        yield row

            async def heads() -> AsyncIterator[TaskHead]:
                async for row in rows(heads_cur):
                    yield task_head_from_row(row, CODEC)

            async def events() -> AsyncIterator[StoredEvent]:
                async for row in rows(events_cur):
                    yield stored_event_from_row(row, CODEC)

            yield AuditSnapshot(heads(), events())
        finally:
            await self._reader.run(lambda c: c.execute("COMMIT"))

    # --- test and maintenance helpers ---------------------------------------------------------

    # --- leadership and pausing --------------------------------------------------------------

    async def save_checkpoint(self, task_id: UUID, lock_token: UUID, checkpoint: Any) -> bool:
        """One fenced update."""
        params = {"id": str(task_id), "token": str(lock_token), "checkpoint": _dump(checkpoint)}
        row = await self._write(lambda c: c.execute(Q["save_checkpoint"], params).fetchone())
        return row is not None

    async def lead(self, name: str, holder: str, now: datetime, ttl_secs: float) -> int | None:
        """One upsert that holds only for the holder or over an expired lease."""
        params = {
            "name": name,
            "holder": holder,
            "now": to_micros(now),
            "expires_at": to_micros(now + timedelta(seconds=ttl_secs)),
        }
        row = await self._write(lambda c: c.execute(Q["lead"], params).fetchone())
        self._lease_commits += 1
        return None if row is None else int(row[0])

    async def resign(self, name: str, holder: str) -> None:
        """End our lease now."""
        await self._write(lambda c: c.execute(Q["resign"], {"name": name, "holder": holder}))

    async def leader(self, name: str) -> LeaderInfo | None:
        """The lease row."""

        def run(c: sqlite3.Connection) -> LeaderInfo | None:
            r = c.execute(Q["leader"], {"name": name}).fetchone()
            if r is None:
                return None
            times = [from_micros(r[k]) for k in ("acquired_at", "renewed_at", "expires_at")]
            return LeaderInfo(r["name"], r["holder"], r["term"], *times)  # type: ignore[arg-type]

        return await self._reader.run(run)

    async def pause(self, task_type: str, by: str, reason: str, now: datetime) -> None:
        """Insert the pause."""
        params = {"task_type": task_type, "by": by, "reason": reason, "now": to_micros(now)}
        await self._write(lambda c: c.execute(Q["pause"], params))

    async def resume(self, task_type: str) -> bool:
        """Delete the pause."""
        cur = await self._write(lambda c: c.execute(Q["resume"], {"task_type": task_type}))
        return cur.rowcount > 0

    async def paused(self) -> list[PausedType]:
        """Every pause."""

        def run(c: sqlite3.Connection) -> list[PausedType]:
            return [
                PausedType(r["task_type"], from_micros(r["paused_at"]), r["paused_by"],  # type: ignore[arg-type]
                           r["reason"])
                for r in c.execute(Q["paused"])
            ]  # fmt: skip

        return await self._reader.run(run)

    async def execute_raw(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run statements as they are (for tests that simulate tampering)."""
        async with self._write_lock:
            await self._writer.run(
                lambda c: c.executescript(sql) if params is None else c.execute(sql, params)
            )

    # --- cron schedules (R18) ------------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> bool:
        """Insert unless the name is taken in the tenant."""
        params = {
            "tenant": schedule.tenant,
            "name": schedule.name,
            "cron": schedule.cron,
            "tz": schedule.tz,
            "task": _dump(schedule.task),
            "catch_up": schedule.catch_up.value,
            "next_at": to_micros(schedule.next_at),
            "created_by": schedule.created_by,
            "now": to_micros(schedule.created_at),
        }
        rows = await self._write(lambda c: c.execute(Q["insert_schedule"], params).fetchall())
        return bool(rows)

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        """By tenant and name."""
        return await self._schedules("list_schedules", {"tenant": tenant})

    async def delete_schedule(self, tenant: str, name: str) -> Schedule | None:
        """Delete and return the row."""
        params = {"tenant": tenant, "name": name}
        rows = await self._write(lambda c: c.execute(Q["delete_schedule"], params).fetchall())
        return _schedule_from_row(rows[0]) if rows else None

    async def due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        """On the reader connection: no write lock while nothing is due."""
        return await self._schedules("due_schedules", {"now": to_micros(now), "limit": limit})

    async def advance_schedule(
        self, schedule: Schedule, next_at: datetime, fired: datetime | None, now: datetime
    ) -> bool:
        """Guarded on the ``next_at`` the caller read."""
        params = {
            "tenant": schedule.tenant,
            "name": schedule.name,
            "expected": to_micros(schedule.next_at),
            "next_at": to_micros(next_at),
            "last_slot_at": to_micros(fired),
            "now": to_micros(now),
        }
        cur = await self._write(lambda c: c.execute(Q["advance_schedule"], params))
        return cur.rowcount > 0

    async def _schedules(self, query: str, params: dict[str, Any]) -> list[Schedule]:
        def run(c: sqlite3.Connection) -> list[Schedule]:
            return [_schedule_from_row(row) for row in c.execute(Q[query], params)]

        return await self._reader.run(run)


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


def _schedule_from_row(row: sqlite3.Row) -> Schedule:
    """A Schedule from an aq_schedules row (times in microseconds, the template JSON text)."""

    def at(column: str) -> datetime:
        value = from_micros(row[column])
        assert value is not None
        return value

    return Schedule(
        tenant=row["tenant"],
        name=row["name"],
        cron=row["cron"],
        tz=row["tz"],
        task=json.loads(row["task"]),
        catch_up=CatchUp(row["catch_up"]),
        next_at=at("next_at"),
        created_by=row["created_by"],
        created_at=at("created_at"),
        updated_at=at("updated_at"),
        last_slot_at=from_micros(row["last_slot_at"]),
        last_fired_at=from_micros(row["last_fired_at"]),
    )
