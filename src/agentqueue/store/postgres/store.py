"""The PostgreSQL store: psycopg 3, a connection pool, FOR UPDATE SKIP LOCKED, bulk unnest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...domain.audit import StoredEvent
from ...domain.errors import StoreUnavailable
from ...domain.models import Event, LogRecord, Task
from ...domain.schedule import CatchUp, Schedule
from ...domain.states import BulkEvent, TaskState
from ..base import (
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
from ..errors import from_postgres
from ..migrate import Migration, latest_version, run_migrations
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
)
from ..rows import task_from_row as _task_from_row
from ..sqlfile import load_queries

Q = load_queries("postgres")

CODEC = Codec(
    time_out=lambda t: t.isoformat(),
    uuid_out=str,
    uuids_out=lambda ids: [str(i) for i in ids],
    json_out=lambda value: value,  # embedded as is in the JSON document
)


def _doc(rows: object) -> str:
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False)


def task_from_row(row: dict[str, Any]) -> Task:
    """A Task from a PostgreSQL row."""
    return _task_from_row(row, CODEC)


WORK_HINTS = ("lapsed", "due", "admissible", "queued", "held", "tool_timeouts", "p0_queued")


class PostgresTx:
    """One transaction on one pooled connection."""

    def __init__(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        self._conn = conn

    async def _tasks(self, query: str, params: dict[str, Any]) -> list[Task]:
        cur = await self._conn.execute(Q[query], params, prepare=True)
        return [task_from_row(row) for row in await cur.fetchall()]

    async def lock(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """Lock and return the tasks with these ids."""
        return await self._tasks("lock_tasks", {"ids": list(ids), "tenant": tenant})

    async def lock_lapsed(self, limit: int, now: datetime) -> list[Task]:
        """Executing tasks whose lease ran out."""
        return await self._tasks("lock_lapsed", {"limit": limit, "now": now})

    async def lock_due_retries(self, limit: int, now: datetime) -> list[Task]:
        """Retrying tasks whose backoff elapsed."""
        return await self._tasks("lock_due_retries", {"limit": limit, "now": now})

    async def insert_logs(self, records: Sequence[LogRecord]) -> None:
        """Bulk insert of captured output."""
        if records:
            rows = _doc(log_rows(records, CODEC))
            await self._conn.execute(Q["insert_logs"], {"rows": rows}, prepare=True)

    async def notify(self, channel: str, payload: str = "") -> None:
        """NOTIFY, delivered when the transaction commits."""
        await self._conn.execute(Q["notify"], {"channel": channel, "payload": payload})

    async def apply(self, changes: Sequence[Change]) -> set[UUID]:
        """Guarded bulk update plus bulk event insert, in one statement."""
        if not changes:
            return set()
        params = {
            "rows": _doc(change_rows(changes, CODEC)),
            "events": _doc(event_rows([c.event for c in changes], CODEC)),
        }
        cur = await self._conn.execute(Q["apply"], params, prepare=True)
        return {row["id"] for row in await cur.fetchall()}

    async def lock_admission(self) -> None:
        """A transaction-scoped advisory lock: one admitter under limits at a time."""
        await self._conn.execute(Q["admission_lock"])

    async def active_load(self) -> list[LoadRow]:
        """Queued and executing tasks, grouped."""
        cur = await self._conn.execute(Q["active_load"], prepare=True)
        return [LoadRow(r["tenant"], r["agent"], r["n"]) for r in await cur.fetchall()]

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
            "now": now,
            "tenants": list(tenants),
            "per_tenant": per_tenant,
            "paused": list(paused),
            "skip_types": list(skip_types),
        }
        cur = await self._conn.execute(Q["admission_candidates"], params, prepare=True)
        return [
            Candidate(
                r["id"],
                r["tenant"],
                r["task_type"],
                r["assignee"],
                r["priority"],
                r["eligible_at"],
                r["seq"],
                r["kind"],
                tuple(r["labels"]),
            )
            for r in await cur.fetchall()
        ]

    async def rate_buckets(self, names: Sequence[str]) -> dict[str, Bucket]:
        """Locked until commit."""
        cur = await self._conn.execute(Q["rate_buckets"], {"names": list(names)})
        return {r["name"]: Bucket(r["tokens"], r["updated_at"]) for r in await cur.fetchall()}

    async def save_rate_buckets(self, buckets: Mapping[str, Bucket]) -> None:
        """Upsert."""
        if buckets:
            rows = [
                {"name": n, "tokens": b.tokens, "updated_at": b.updated_at.isoformat()}
                for n, b in buckets.items()
            ]
            await self._conn.execute(Q["save_rate_buckets"], {"rows": _doc(rows)})

    async def admit_ids(
        self, ids: Sequence[UUID], now: datetime, event: BulkEvent, agent: str | None = None
    ) -> list[UUID]:
        """One statement; queued workers hear of it at commit."""
        if not ids:
            return []
        params = {
            "agent": agent,
            "ids": list(ids),
            "now": now,
            "actor": event.actor,
            "tail": event.tail,
            "data": event.data_text,
        }
        cur = await self._conn.execute(Q["admit_ids"], params, prepare=True)
        admitted = {row["id"] for row in await cur.fetchall()}
        return [i for i in ids if i in admitted]

    async def preemptible(self, before: datetime, min_priority: int) -> dict[str, int]:
        """One grouped count."""
        params = {"before": before, "min_priority": min_priority}
        cur = await self._conn.execute(Q["preemptible"], params, prepare=True)
        return {r["agent"]: int(r["n"]) for r in await cur.fetchall()}

    async def note_waiting(self, reasons: Mapping[UUID, str], until: datetime) -> None:
        """One statement for all."""
        if reasons:
            rows = [{"id": str(i), "reason": r} for i, r in reasons.items()]
            await self._conn.execute(Q["note_waiting"], {"rows": json.dumps(rows), "until": until})

    async def active_count(self) -> int:
        """Queued plus executing tasks."""
        cur = await self._conn.execute(Q["active_count"], prepare=True)
        row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def pending_tenants(self, limit: int) -> list[str]:
        """Tenants with pending tasks."""
        cur = await self._conn.execute(Q["pending_tenants"], {"limit": limit}, prepare=True)
        return [r["tenant"] for r in await cur.fetchall()]

    async def admit_next(
        self,
        limit: int,
        now: datetime,
        aging_secs: float,
        event: BulkEvent,
        paused: Sequence[str] = (),
    ) -> list[UUID]:
        """The store's ADMIT statement, inside this transaction (its notice goes at commit)."""
        params = {
            "paused": list(paused),
            "limit": limit,
            "now": now,
            "aging_secs": aging_secs,
            "actor": event.actor,
            "tail": event.tail,
            "data": event.data_text,
        }
        cur = await self._conn.execute(Q["admit"], params, prepare=True)
        return [row["id"] for row in await cur.fetchall()]

    async def lock_tool_timeouts(self, now: datetime, limit: int) -> list[Task]:
        """Waiting tasks past their tool deadline."""
        return await self._tasks("lock_tool_timeouts", {"now": now, "limit": limit})

    async def lock_tool_work(self, names: Sequence[str], now: datetime, limit: int) -> list[Task]:
        """Waiting tasks with a call these tools can take."""
        params = {"names": list(names), "now_ts": now.timestamp(), "limit": limit}
        return await self._tasks("lock_tool_work", params)

    async def set_tool_calls(self, task: Task, tool_calls: Sequence[Any]) -> bool:
        """Guarded by state and audit position."""
        params = {
            "id": task.id,
            "expected_seq": task.event_seq,
            "tool_calls": _doc(list(tool_calls)),
        }
        cur = await self._conn.execute(Q["set_tool_calls"], params)
        return await cur.fetchone() is not None

    async def lock_dependents_ready(self, limit: int) -> list[Task]:
        """Held tasks whose dependencies settled."""
        return await self._tasks("lock_dependents_ready", {"limit": limit})

    async def task_states(self, ids: Sequence[UUID]) -> dict[UUID, TaskState]:
        """States by id."""
        cur = await self._conn.execute(Q["task_states"], {"ids": list(ids)})
        return {r["id"]: TaskState(r["state"]) for r in await cur.fetchall()}

    # --- Dead letter retention and alerts ---------------------------------------------------

    async def enqueue_outbox(self, items: Sequence[OutboxItem]) -> int:
        """Insert the deliveries not already stored."""
        if not items:
            return 0
        rows = _doc(outbox_rows(items, CODEC))
        cur = await self._conn.execute(Q["enqueue_outbox"], {"rows": rows})
        return len(await cur.fetchall())

    async def lease_outbox(
        self, kind: str, now: datetime, limit: int, until: datetime
    ) -> list[OutboxRow]:
        """Pick due deliveries (skipping locked ones) and push them to ``until``."""
        params = {"kind": kind, "now": now, "limit": limit, "until": until}
        cur = await self._conn.execute(Q["lease_outbox"], params)
        return sorted((outbox_from_row(r, CODEC) for r in await cur.fetchall()), key=lambda r: r.id)

    async def record_deliveries(self, results: Sequence[DeliveryResult]) -> None:
        """Record tries in one statement."""
        if results:
            rows = _doc(delivery_rows(results, CODEC))
            await self._conn.execute(Q["record_deliveries"], {"rows": rows})

    async def lock_expired_dead_letters(
        self, limit: int, p0_before: datetime, other_before: datetime
    ) -> list[Task]:
        """Dead letters past retention, skipping rows other transactions hold."""
        params = {
            "limit": limit,
            "p0_before": p0_before,
            "other_before": other_before,
            "latest": max(p0_before, other_before),
        }
        return await self._tasks("lock_expired_dead_letters", params)

    async def purge(self, items: Sequence[Purge]) -> set[UUID]:
        """Guarded delete, last events and log cleanup in one statement."""
        if not items:
            return set()
        params = {
            "rows": _doc(purge_rows(items, CODEC)),
            "events": _doc(event_rows([p.event for p in items], CODEC)),
        }
        cur = await self._conn.execute(Q["purge"], params)
        return {row["id"] for row in await cur.fetchall()}


class PostgresStore:
    """Tasks and events in PostgreSQL, shared by any number of processes and machines."""

    dialect = "postgres"
    push_notifications = True

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self._url = url
        self._sizes = (min_size, max_size)
        self._pool = self._new_pool()

    def _new_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]:
        return AsyncConnectionPool(
            self._url,
            connection_class=psycopg.AsyncConnection[DictRow],
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            kwargs={"row_factory": dict_row, "autocommit": True, "options": "-c TimeZone=UTC"},
            name="agentqueue",
        )

    async def open(self, *, migrate: bool = True, wait_secs: float = 15.0) -> None:
        """Connect and migrate. A permanent fault (no such database, a wrong password, a bad
        option) fails at once; a passing one is tried again for up to ``wait_secs``, and
        raised as StoreUnavailable after that (calling ``open`` again tries afresh)."""
        if self._pool.closed:
            self._pool = self._new_pool()  # a pool once closed cannot be opened again
        passing = await self._probe()
        try:
            await self._pool.open(wait=True, timeout=wait_secs)
        except Exception as exc:  # the pool raises its own timeout type
            await self._pool.close()
            error = from_postgres(exc)
            if passing is not None and isinstance(error, StoreUnavailable):
                error = StoreUnavailable(f"{passing} (waited {wait_secs:g} s)")
            raise error from None
        if migrate and await self.schema_version() < latest_version(self.dialect):
            await self.migrate()

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

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[DictRow]]:
        """A pooled connection; driver errors leave it classified."""
        try:
            async with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise from_postgres(exc) from exc

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    # --- migrations -------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply missing migrations under an advisory lock."""
        return await run_migrations(self, self.dialect)

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

    async def schema_version(self) -> int:
        """The highest applied migration, 0 on an empty database."""
        versions = await self.applied_versions()
        return max(versions, default=0)

    # --- writes -----------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresTx]:
        """A transaction on a pooled connection."""
        async with self._connection() as conn, conn.transaction():
            yield PostgresTx(conn)

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Bulk insert with ON CONFLICT DO NOTHING; creation events only for inserted rows."""
        if not new:
            return {}
        params = {
            "rows": _doc(new_task_rows(new, CODEC)),
            "events": _doc(event_rows([e for n in new for e in n.events], CODEC)),
        }
        async with self._connection() as conn:
            cur = await conn.execute(Q["insert_tasks"], params, prepare=True)
            return {row["id"]: row["seq"] for row in await cur.fetchall()}

    async def heartbeat(
        self, leases: Sequence[Lease], now: datetime, ttl_secs: float, grace_secs: float
    ) -> set[UUID]:
        """Extend the leases whose token still holds."""
        if not leases:
            return set()
        params = {
            "rows": _doc([{"id": str(x.task_id), "token": str(x.lock_token)} for x in leases]),
            "now": now,
            "ttl_secs": ttl_secs,
            "grace_secs": grace_secs,
        }
        async with self._connection() as conn:
            cur = await conn.execute(Q["heartbeat"], params, prepare=True)
            return {row["id"] for row in await cur.fetchall()}

    # --- the set-wise hot transitions (domain.states.BULK_ACTIONS) ---------------------------

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
        """One statement, autocommitted: pick, lock, update, record events, return the rows."""
        params = {
            "paused": list(paused),
            "limit": limit,
            "task_types": list(task_types) if task_types is not None else None,
            "agents": list(agents) if agents is not None else None,
            "now": now,
            "aging_secs": aging_secs,
            "worker": event.actor,
            "ttl_secs": ttl_secs,
            "grace_secs": grace_secs,
            "tail": event.tail,
            "data": event.data_text,
        }
        return await self._tasks("claim", params)

    async def admit(
        self,
        limit: int,
        now: datetime,
        aging_secs: float,
        event: BulkEvent,
        paused: Sequence[str] = (),
    ) -> list[UUID]:
        """One statement, autocommitted: pick, lock, update, record events, notify."""
        async with self._connection() as conn:
            return await PostgresTx(conn).admit_next(limit, now, aging_secs, event, paused)

    async def complete(
        self,
        items: Sequence[tuple[UUID, UUID, Any]],
        now: datetime,
        event: BulkEvent,
        wake_scheduler: bool = False,
    ) -> dict[UUID, tuple[int, str]]:
        """One statement for the whole batch; rows whose lease moved on are left alone."""
        if not items:
            return {}
        rows = _doc([{"id": str(i), "token": str(t), "result": r} for i, t, r in items])
        params = {
            "rows": rows,
            "now": now,
            "actor": event.actor,
            "tail": event.tail,
            "data": event.data_text,
            "wake": wake_scheduler,
        }
        async with self._connection() as conn:
            cur = await conn.execute(Q["complete"], params, prepare=True)
            return {row["id"]: (row["event_seq"], row["last_hash"]) for row in await cur.fetchall()}

    # --- reads ------------------------------------------------------------------------------

    async def _tasks(self, query: str, params: dict[str, Any]) -> list[Task]:
        async with self._connection() as conn:
            cur = await conn.execute(Q[query], params, prepare=True)
            return [task_from_row(row) for row in await cur.fetchall()]

    async def find_existing(self, keys: Sequence[DedupKey]) -> list[Task]:
        """Tasks sharing an idempotency key, or live tasks sharing a source key."""
        by_key = [k for k in keys if k.idempotency_key is not None]
        by_source = [k for k in keys if k.source_id is not None]
        found: dict[UUID, Task] = {}
        if by_key:
            for task in await self._tasks(
                "find_by_idempotency",
                {"tenant": [k.tenant for k in by_key], "key": [k.idempotency_key for k in by_key]},
            ):
                found[task.id] = task
        if by_source:
            for task in await self._tasks(
                "find_live_by_source",
                {
                    "tenant": [k.tenant for k in by_source],
                    "source": [k.source for k in by_source],
                    "source_id": [k.source_id for k in by_source],
                },
            ):
                found[task.id] = task
        return list(found.values())

    async def get_tasks(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """Tasks by id."""
        return await self._tasks("get_tasks", {"ids": list(ids), "tenant": tenant})

    async def list_tasks(self, flt: TaskFilter) -> list[Task]:
        """Filtered, newest first."""
        params = {
            "tenant": flt.tenant,
            "states": [s.value for s in flt.states] or None,
            "task_types": list(flt.task_types) or None,
            "sources": list(flt.sources) or None,
            "before_seq": flt.before_seq,
            "limit": flt.limit,
        }
        return await self._tasks("list_tasks", params)

    async def events(self, task_id: UUID, tenant: str | None = None) -> list[Event]:
        """One task's events in order."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["events"], {"task_id": task_id, "tenant": tenant})
            return [event_from_row(row, CODEC) for row in await cur.fetchall()]

    async def work_hints(self, now: datetime) -> WorkHints:
        """One read over the partial indexes."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["work_hints"], {"now": now}, prepare=True)
            row = await cur.fetchone()
        assert row is not None
        return WorkHints(*(bool(row[k]) for k in WORK_HINTS))

    async def queued_p0(self, limit: int = 100) -> list[tuple[str | None, str]]:
        """One read."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["queued_p0"], {"limit": limit}, prepare=True)
            return [(r["agent"], r["task_type"]) for r in await cur.fetchall()]

    async def logs(self, task_id: UUID, tenant: str | None = None) -> list[LogRecord]:
        """Captured output of one task."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["logs"], {"task_id": task_id, "tenant": tenant})
            return [log_from_row(row, CODEC) for row in await cur.fetchall()]

    async def notify(self, channel: str, payload: str = "") -> None:
        """NOTIFY now."""
        async with self._connection() as conn:
            await conn.execute(Q["notify"], {"channel": channel, "payload": payload})

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
                try:
                    async for note in conn.notifies():
                        yield Notice(note.channel, note.payload)
                except psycopg.Error as exc:
                    raise from_postgres(exc) from exc

            yield notices()
        except psycopg.Error as exc:
            raise from_postgres(exc) from exc
        finally:
            await conn.close()

    async def count_parked(self, now: datetime, tenant: str | None = None) -> int:
        """One count."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["count_parked"], {"now": now, "tenant": tenant})
            row = await cur.fetchone()
            return int(row["count"]) if row else 0

    async def count_by_state(self, tenant: str | None = None) -> dict[TaskState, int]:
        """Counts per state."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["count_by_state"], {"tenant": tenant})
            return {TaskState(row["state"]): row["count"] for row in await cur.fetchall()}

    @asynccontextmanager
    async def audit_snapshot(self) -> AsyncIterator[AuditSnapshot]:
        """Heads and events through two server-side cursors in one REPEATABLE READ snapshot."""
        async with self._connection() as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            try:
                async with conn.transaction():
                    heads_cur = conn.cursor(name="aq_heads")
                    events_cur = conn.cursor(name="aq_events")
                    await heads_cur.execute(Q["task_heads"])
                    await events_cur.execute(Q["all_events"])

                    async def heads() -> AsyncIterator[TaskHead]:
                        async for row in heads_cur:
                            yield TaskHead(
                                row["id"],
                                row["tenant"],
                                row["event_seq"],
                                row["last_hash"],
                                row["state"],
                            )

                    async def events() -> AsyncIterator[StoredEvent]:
                        async for row in events_cur:
                            yield stored_event_from_row(row, CODEC)

                    yield AuditSnapshot(heads(), events())
                    await heads_cur.close()
                    await events_cur.close()
            finally:
                await conn.set_isolation_level(None)

    # --- test and maintenance helpers ---------------------------------------------------------

    # --- leadership and pausing --------------------------------------------------------------

    async def _one(self, query: str, params: dict[str, Any]) -> dict[str, Any] | None:
        async with self._connection() as conn:
            cur = await conn.execute(Q[query], params)
            return await cur.fetchone()

    async def save_checkpoint(self, task_id: UUID, lock_token: UUID, checkpoint: Any) -> bool:
        """One fenced update."""
        params = {"id": task_id, "token": lock_token, "checkpoint": _doc(checkpoint)}
        return await self._one("save_checkpoint", params) is not None

    async def lead(self, name: str, holder: str, now: datetime, ttl_secs: float) -> int | None:
        """One upsert that holds only for the holder or over an expired lease."""
        params = {
            "name": name,
            "holder": holder,
            "now": now,
            "expires_at": now + timedelta(seconds=ttl_secs),
        }
        row = await self._one("lead", params)
        return None if row is None else int(row["term"])

    async def resign(self, name: str, holder: str) -> None:
        """End our lease now."""
        await self._one_exec("resign", {"name": name, "holder": holder})

    async def _one_exec(self, query: str, params: dict[str, Any]) -> int:
        async with self._connection() as conn:
            cur = await conn.execute(Q[query], params)
            return cur.rowcount

    async def leader(self, name: str) -> LeaderInfo | None:
        """The lease row."""
        row = await self._one("leader", {"name": name})
        return None if row is None else LeaderInfo(**row)

    async def pause(self, task_type: str, by: str, reason: str, now: datetime) -> None:
        """Insert the pause."""
        params = {"task_type": task_type, "by": by, "reason": reason, "now": now}
        await self._one_exec("pause", params)

    async def resume(self, task_type: str) -> bool:
        """Delete the pause; wake the scheduler, whose admissions it held back."""
        resumed = await self._one_exec("resume", {"task_type": task_type}) > 0
        if resumed:
            await self.notify("aq_pending", "resumed")
            await self.notify("aq_queued", "resumed")
        return resumed

    async def paused(self) -> list[PausedType]:
        """Every pause."""
        async with self._connection() as conn:
            cur = await conn.execute(Q["paused"])
            return [PausedType(**row) for row in await cur.fetchall()]

    async def execute_raw(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run one statement as is (for tests that simulate tampering)."""
        async with self._connection() as conn:
            await conn.execute(sql.encode() if params is None else sql, params)

    # --- cron schedules (R18) ------------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> bool:
        """Insert unless the name is taken in the tenant."""
        params = {
            "tenant": schedule.tenant,
            "name": schedule.name,
            "cron": schedule.cron,
            "tz": schedule.tz,
            "task": _doc(schedule.task),
            "catch_up": schedule.catch_up.value,
            "next_at": schedule.next_at,
            "created_by": schedule.created_by,
            "now": schedule.created_at,
        }
        async with self._connection() as conn:
            cur = await conn.execute(Q["insert_schedule"], params)
            return bool(await cur.fetchall())

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        """By tenant and name."""
        return await self._schedules("list_schedules", {"tenant": tenant})

    async def delete_schedule(self, tenant: str, name: str) -> Schedule | None:
        """Delete and return the row."""
        found = await self._schedules("delete_schedule", {"tenant": tenant, "name": name})
        return found[0] if found else None

    async def due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        """One probe of aq_schedules_due while nothing is due."""
        return await self._schedules("due_schedules", {"now": now, "limit": limit})

    async def advance_schedule(
        self, schedule: Schedule, next_at: datetime, fired: datetime | None, now: datetime
    ) -> bool:
        """Guarded on the ``next_at`` the caller read."""
        params = {
            "tenant": schedule.tenant,
            "name": schedule.name,
            "expected": schedule.next_at,
            "next_at": next_at,
            "last_slot_at": fired,
            "now": now,
        }
        async with self._connection() as conn:
            cur = await conn.execute(Q["advance_schedule"], params, prepare=True)
            return cur.rowcount > 0

    async def _schedules(self, query: str, params: dict[str, Any]) -> list[Schedule]:
        async with self._connection() as conn:
            cur = await conn.execute(Q[query], params, prepare=True)
            return [_schedule_from_row(row) for row in await cur.fetchall()]


def _schedule_from_row(row: dict[str, Any]) -> Schedule:
    """A Schedule from an aq_schedules row (the driver returns datetimes and parsed JSON)."""
    return Schedule(
        tenant=row["tenant"],
        name=row["name"],
        cron=row["cron"],
        tz=row["tz"],
        task=row["task"],
        catch_up=CatchUp(row["catch_up"]),
        next_at=row["next_at"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_slot_at=row["last_slot_at"],
        last_fired_at=row["last_fired_at"],
    )
