"""The PostgreSQL store: psycopg 3, a connection pool, FOR UPDATE SKIP LOCKED, bulk unnest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ...domain.audit import StoredEvent
from ...domain.errors import StoreError
from ...domain.models import Event, LogRecord, Task
from ...domain.states import BulkEvent, TaskState
from ..base import (
    AuditSnapshot,
    Change,
    DedupKey,
    Lease,
    NewTask,
    Notice,
    TaskFilter,
    TaskHead,
    WorkHints,
)
from ..migrate import Migration, latest_version, run_migrations
from ..rows import (
    Codec,
    change_rows,
    event_from_row,
    event_rows,
    log_from_row,
    log_rows,
    new_task_rows,
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


class PostgresStore:
    """Tasks and events in PostgreSQL, shared by any number of processes and machines."""

    dialect = "postgres"
    push_notifications = True

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self._url = url
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]] = AsyncConnectionPool(
            url,
            connection_class=psycopg.AsyncConnection[DictRow],
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"row_factory": dict_row, "autocommit": True, "options": "-c TimeZone=UTC"},
            name="agentqueue",
        )

    async def open(self, *, migrate: bool = True) -> None:
        """Open the pool and migrate."""
        try:
            await self._pool.open(wait=True, timeout=15)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot reach PostgreSQL: {_redact(str(exc))}") from None
        except Exception as exc:  # the pool raises its own timeout type
            raise StoreError(f"cannot reach PostgreSQL: {_redact(str(exc))}") from None
        if migrate and await self.schema_version() < latest_version(self.dialect):
            await self.migrate()

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    # --- migrations -------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply missing migrations under an advisory lock."""
        return await run_migrations(self, self.dialect)

    async def applied_versions(self) -> set[int]:
        """Versions recorded in aq_schema_version."""
        async with self._pool.connection() as conn:
            # CREATE TABLE IF NOT EXISTS is not safe against a concurrent creator (both pass the
            # check, one fails on pg_type): create it under the migration lock.
            async with conn.transaction():
                await conn.execute(Q["migration_lock"])
                await conn.execute(Q["create_version_table"])
            cur = await conn.execute(Q["applied_versions"])
            return {row["version"] for row in await cur.fetchall()}

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration unless a concurrent migrator already did."""
        async with self._pool.connection() as conn, conn.transaction():
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
        async with self._pool.connection() as conn, conn.transaction():
            yield PostgresTx(conn)

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Bulk insert with ON CONFLICT DO NOTHING; creation events only for inserted rows."""
        if not new:
            return {}
        params = {
            "rows": _doc(new_task_rows(new, CODEC)),
            "events": _doc(event_rows([e for n in new for e in n.events], CODEC)),
        }
        async with self._pool.connection() as conn:
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
        async with self._pool.connection() as conn:
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
    ) -> list[Task]:
        """One statement, autocommitted: pick, lock, update, record events, return the rows."""
        params = {
            "limit": limit,
            "task_types": list(task_types) if task_types is not None else None,
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
        self, limit: int, now: datetime, aging_secs: float, event: BulkEvent
    ) -> list[UUID]:
        """One statement, autocommitted: pick, lock, update, record events, notify."""
        params = {
            "limit": limit,
            "now": now,
            "aging_secs": aging_secs,
            "actor": event.actor,
            "tail": event.tail,
            "data": event.data_text,
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["admit"], params, prepare=True)
            return [row["id"] for row in await cur.fetchall()]

    async def complete(
        self, items: Sequence[tuple[UUID, UUID, Any]], now: datetime, event: BulkEvent
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
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["complete"], params, prepare=True)
            return {row["id"]: (row["event_seq"], row["last_hash"]) for row in await cur.fetchall()}

    # --- reads ------------------------------------------------------------------------------

    async def _tasks(self, query: str, params: dict[str, Any]) -> list[Task]:
        async with self._pool.connection() as conn:
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
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["events"], {"task_id": task_id, "tenant": tenant})
            return [event_from_row(row, CODEC) for row in await cur.fetchall()]

    async def work_hints(self, now: datetime) -> WorkHints:
        """One read over the partial indexes."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["work_hints"], {"now": now}, prepare=True)
            row = await cur.fetchone()
        assert row is not None
        return WorkHints(row["lapsed"], row["due"], row["admissible"], row["queued"])

    async def logs(self, task_id: UUID, tenant: str | None = None) -> list[LogRecord]:
        """Captured output of one task."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["logs"], {"task_id": task_id, "tenant": tenant})
            return [log_from_row(row, CODEC) for row in await cur.fetchall()]

    async def notify(self, channel: str, payload: str = "") -> None:
        """NOTIFY now."""
        async with self._pool.connection() as conn:
            await conn.execute(Q["notify"], {"channel": channel, "payload": payload})

    @asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notice]]:
        """LISTEN on a connection of its own, outside the pool, for as long as the context."""
        try:
            conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot reach PostgreSQL: {_redact(str(exc))}") from None
        try:
            for channel in channels:
                await conn.execute(sql.SQL(Q["listen"]).format(channel=sql.Identifier(channel)))

            async def notices() -> AsyncIterator[Notice]:
                async for note in conn.notifies():
                    yield Notice(note.channel, note.payload)

            yield notices()
        finally:
            await conn.close()

    async def count_by_state(self, tenant: str | None = None) -> dict[TaskState, int]:
        """Counts per state."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(Q["count_by_state"], {"tenant": tenant})
            return {TaskState(row["state"]): row["count"] for row in await cur.fetchall()}

    @asynccontextmanager
    async def audit_snapshot(self) -> AsyncIterator[AuditSnapshot]:
        """Heads and events through two server-side cursors in one REPEATABLE READ snapshot."""
        async with self._pool.connection() as conn:
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

    async def execute_raw(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run one statement as is (for tests that simulate tampering)."""
        async with self._pool.connection() as conn:
            await conn.execute(sql.encode() if params is None else sql, params)


def _redact(message: str) -> str:
    """Drop anything that looks like a password from a driver message."""
    import re

    return re.sub(r"(password=)\S+", r"\1***", re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", message))
