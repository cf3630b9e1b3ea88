"""The store's operations, written once over a :class:`~.dialect.Dialect` (ARCHITECTURE rule 4);
those inside a write transaction are in ``tx.py``.

Every operation runs named queries of the same name on both dialects; the dialect supplies the
connections, the queries, and the :class:`~.rows.Codec` that encodes parameters and decodes rows.
What truly differs (SQLite's writer thread and its statements that follow a write, PostgreSQL's
pool, LISTEN and server-side cursors) stays in ``sqlite/dialect.py`` and ``postgres/dialect.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ..domain.access import TokenRecord
from ..domain.audit import Anchor, AnchorFold, StoredEvent
from ..domain.deliveries import DeliveryRecord
from ..domain.models import Event, LogRecord, Task
from ..domain.schedule import Schedule
from ..domain.states import BulkEvent, TaskState
from .base import (
    ANCHOR_PAGE,
    CHANNEL_PENDING,
    CHANNEL_QUEUED,
    AdmitParams,
    AuditSnapshot,
    BusyWorker,
    ClaimParams,
    DedupKey,
    DeliveryFilter,
    EndedCount,
    EndedTimes,
    LeaderInfo,
    Lease,
    LoadRow,
    MetricCount,
    MetricSnapshot,
    NewTask,
    Notice,
    PausedType,
    Room,
    TaskFilter,
    TaskHead,
    WorkerSlots,
    WorkHints,
)
from .dialect import Dialect, Session
from .migrate import latest_version, refuse_newer, run_migrations
from .rows import (
    Row,
    anchor_from_row,
    anchor_params,
    delivery_attempt_from_row,
    delivery_record_from_row,
    dump,
    event_from_row,
    load_rows,
    record_from_row,
    room_from_rows,
    stored_event_from_row,
    task_head_from_row,
)
from .tx import QueryOps, SQLTx

WORK_HINTS = ("lapsed", "due", "admissible", "queued", "held", "tool_timeouts", "p0_queued")


class SQLStore(QueryOps):
    """The Store protocol over one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect
        self.dialect = dialect.name
        self.push_notifications = dialect.push_notifications
        self.separate_writer = dialect.separate_writer
        self.codec = dialect.codec

    @property
    def commits(self) -> int:
        """Write transactions this store has committed."""
        return self._d.commits

    async def open(self, *, migrate: bool = True, wait_secs: float | None = None) -> None:
        """Connect, refuse a schema newer than this release, and migrate if it is behind."""
        await self._d.open(wait_secs)
        try:
            version = await self.schema_version()
            refuse_newer(version, self.dialect)
            if migrate and version < latest_version(self.dialect):
                await self.migrate()
        except BaseException:
            await self._d.close()
            raise

    async def close(self) -> None:
        """Release connections."""
        await self._d.close()

    async def migrate(self) -> list[int]:
        """Apply missing migrations."""
        return await run_migrations(self._d, self.dialect)

    async def schema_version(self) -> int:
        """The highest applied migration, 0 on an empty database."""
        return max(await self._d.applied_versions(), default=0)

    def latest_schema_version(self) -> int:
        """The last migration shipped for this dialect."""
        return latest_version(self.dialect)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLTx]:
        """A write transaction."""
        async with self._d.transaction() as session:
            yield SQLTx(session, self._d)

    # --- the set-wise hot transitions (domain.states.BULK_ACTIONS) ---------------------------

    async def claim(self, params: ClaimParams) -> list[Task]:
        """Pick, lock, update and record events for the batch; the rows in claim order. A
        claim that admits is a transaction of its own (the admission lock, the room, the
        claim: one round trip with its COMMIT)."""
        if params.admit is not None:
            async with self.transaction() as tx:
                claimed = await tx.claim_next(params)
            return claimed.result()
        async with self._d.write() as s:
            table = await s.fetch_table("claim", self._claim_values(params))
        # Decoded once written: SQLite's one writer is free for the next write meanwhile.
        return self._claimed(table, params, self._d.orders_in_sql)

    async def admit(self, params: AdmitParams) -> list[UUID]:
        """Pick, lock, update, record events and notify for the batch."""
        async with self._d.write() as s:
            rows = await s.fetch("admit", self._admit_values(params))
        return self._admitted(rows, params, self._d.orders_in_sql)

    async def complete(
        self,
        items: Sequence[tuple[UUID, UUID, Any]],
        now: datetime,
        event: BulkEvent,
        wake_scheduler: bool = False,
    ) -> dict[UUID, tuple[int, str]]:
        """The whole batch at once; rows whose lease moved on are left alone."""
        if not items:
            return {}
        rows = dump(
            [{"id": str(i), "token": str(t), "result": self.codec.json_out(r)} for i, t, r in items]
        )
        params = self._p(
            rows=rows,
            now=now,
            actor=event.actor,
            tail=event.tail,
            data=event.data_text,
            wake=wake_scheduler,
        )
        async with self._d.write() as s:
            names, done = await s.fetch_table("complete", params)
        if not done:
            return {}
        i, n, h = names.index("id"), names.index("event_seq"), names.index("last_hash")
        uuid = self.codec.uuid
        return {uuid(r[i]): (r[n], r[h]) for r in done}

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Insert what does not conflict, with the events of the rows inserted."""
        if not new:
            return {}
        async with self._d.write() as s:
            return await self._insert_tasks(s, new)

    async def heartbeat(
        self, leases: Sequence[Lease], now: datetime, ttl_secs: float, grace_secs: float
    ) -> set[UUID]:
        """Extend the leases whose token still holds."""
        if not leases:
            return set()
        rows = dump([{"id": str(x.task_id), "token": str(x.lock_token)} for x in leases])
        params = self._p(rows=rows, now=now)
        params.update(self.codec.durations(ttl=ttl_secs, grace=grace_secs))
        async with self._d.write() as s:
            found = await s.fetch("heartbeat", params)
        return {self.codec.uuid(row["id"]) for row in found}

    async def save_checkpoint(self, task_id: UUID, lock_token: UUID, checkpoint: Any) -> bool:
        """One fenced update."""
        params = self._p(id=task_id, token=lock_token, checkpoint=dump(checkpoint))
        async with self._d.write() as s:
            return bool(await s.fetch("save_checkpoint", params))

    # --- reads ------------------------------------------------------------------------------

    async def _read(self, query: str, **values: Any) -> list[Row]:
        async with self._d.read() as s:
            return await s.fetch(query, self._p(**values))

    async def _read_tasks(self, query: str, **values: Any) -> list[Task]:
        async with self._d.read() as s:
            return await self._tasks(s, query, **values)

    async def find_existing(self, keys: Sequence[DedupKey]) -> list[Task]:
        """Tasks sharing an idempotency key, or live tasks sharing a source key."""
        by_key = [{"tenant": k.tenant, "key": k.idempotency_key} for k in keys if k.idempotency_key]
        by_source = [
            {"tenant": k.tenant, "source": k.source, "source_id": k.source_id}
            for k in keys
            if k.source_id is not None
        ]
        found: dict[UUID, Task] = {}
        for query, wanted in (("find_by_idempotency", by_key), ("find_live_by_source", by_source)):
            if wanted:
                for task in await self._read_tasks(query, keys=dump(wanted)):
                    found[task.id] = task
        return list(found.values())

    async def get_tasks(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """Tasks by id."""
        return await self._read_tasks("get_tasks", ids=self.codec.uuids_param(ids), tenant=tenant)

    async def replies(self, tenant: str, ids: Sequence[UUID]) -> list[Task]:
        """The replies to these tasks."""
        return await self._read_tasks("replies", tenant=tenant, ids=self.codec.uuids_param(ids))

    async def list_tasks(self, flt: TaskFilter) -> list[Task]:
        """Filtered, newest first."""
        return await self._read_tasks(
            "list_tasks",
            tenant=flt.tenant,
            states=[s.value for s in flt.states] or None,
            task_types=list(flt.task_types) or None,
            sources=list(flt.sources) or None,
            source_id=flt.source_id,
            assignee=flt.assignee,
            agent=flt.agent,
            text=flt.text,
            # JSON text on both: PostgreSQL matches it as jsonb, SQLite reads it with json_each.
            labels=dump(list(flt.labels)) if flt.labels else None,
            created_after=flt.created_after,
            created_before=flt.created_before,
            before_seq=flt.before_seq,
            limit=flt.limit,
        )

    async def events(self, task_id: UUID, tenant: str | None = None) -> list[Event]:
        """One task's events in order."""
        rows = await self._read("events", task_id=task_id, tenant=tenant)
        return [event_from_row(row, self.codec) for row in rows]

    async def logs(self, task_id: UUID, tenant: str | None = None) -> list[LogRecord]:
        """Captured output of one task."""
        rows = await self._read("logs", task_id=task_id, tenant=tenant)
        return [record_from_row(LogRecord, row, self.codec) for row in rows]

    async def active_load(self) -> list[LoadRow]:
        """Admitted work per (tenant, agent), read without taking the write lock."""
        return load_rows(await self._read("active_load"))

    async def admission_room(self) -> Room:
        """Three index reads, without the admission lock nor the write lock."""
        return room_from_rows(await self._read("admission_room"))

    async def count_parked(self, now: datetime, tenant: str | None = None) -> int:
        """One count."""
        rows = await self._read("count_parked", now=now, tenant=tenant)
        return int(rows[0]["count"]) if rows else 0

    async def count_by_state(self, tenant: str | None = None) -> dict[TaskState, int]:
        """Counts per state."""
        rows = await self._read("count_by_state", tenant=tenant)
        return {TaskState(row["state"]): row["count"] for row in rows}

    async def work_hints(self, now: datetime) -> WorkHints:
        """One read over the partial indexes: no write lock."""
        [row] = await self._read("work_hints", now=now)
        flags = {k: bool(row[k]) for k in WORK_HINTS}
        return WorkHints(**flags, next_schedule_at=self.codec.time_in(row["next_schedule_at"]))

    async def ended_counts(
        self, since: datetime, bucket_secs: int, tenant: str | None = None
    ) -> list[EndedCount]:
        """One grouped read."""
        rows = await self._read("ended_counts", since=since, bucket_secs=bucket_secs, tenant=tenant)
        return [EndedCount(int(r["slot"]), str(r["state"]), int(r["count"])) for r in rows]

    async def ended_sample(
        self, since: datetime, limit: int, tenant: str | None = None
    ) -> list[EndedTimes]:
        """One read, newest first."""
        rows = await self._read("ended_sample", since=since, limit=limit, tenant=tenant)
        return [record_from_row(EndedTimes, r, self.codec) for r in rows]

    async def busy_workers(self) -> list[BusyWorker]:
        """One grouped read over the executing tasks."""
        return [
            record_from_row(BusyWorker, r, self.codec) for r in await self._read("busy_workers")
        ]

    async def outbox_backlog(self, tenant: str | None = None) -> int:
        """One count."""
        rows = await self._read("outbox_backlog", tenant=tenant)
        return int(rows[0]["count"]) if rows else 0

    async def queued_p0(
        self, limit: int = 100, pending_at: datetime | None = None
    ) -> list[tuple[str | None, str]]:
        """One read."""
        rows = await self._read("queued_p0", limit=limit, pending_at=pending_at)
        return [(r["agent"], r["task_type"]) for r in rows]

    # --- metrics ------------------------------------------------------------------------------

    async def metrics(self, by_tenant: bool = False) -> MetricSnapshot:
        """Six small reads on one connection: the rollup (a few rows per writer), and counts
        over partial indexes and small tables."""
        c = self.codec
        async with self._d.read() as s:
            counts = await s.fetch("metric_counts", {})
            depth = await s.fetch("metric_depth_by_tenant" if by_tenant else "metric_depth", {})
            [oldest] = await s.fetch("metric_oldest_queued", {})
            outbox = await s.fetch("metric_outbox", {})
            [leader] = await s.fetch("metric_leader", {})
            workers = await s.fetch("metric_workers", {})
        return MetricSnapshot(
            counts=[
                MetricCount(
                    r["tenant"],
                    r["task_type"],
                    r["agent"],
                    r["metric"],
                    r["label"],
                    int(r["n"]),
                    float(r["total"]),
                )
                for r in counts
            ],
            depth={(r["tenant"], TaskState(r["state"])): int(r["count"]) for r in depth},
            oldest_queued_since=None if oldest["since"] is None else c.at(oldest["since"]),
            outbox={r["kind"]: int(r["count"]) for r in outbox},
            leader_term=int(leader["term"]),
            workers=[
                WorkerSlots(r["name"], int(r["slots"]), int(r["busy"]), c.at(r["heartbeat_at"]))
                for r in workers
            ],
        )

    async def record_worker(self, name: str, slots: int, busy: int, now: datetime) -> None:
        """One upsert (bookkeeping, like a lease renewal: an idle worker's own presence is no
        news to its listener, see SQLite's ``listen``)."""
        async with self._d.write(renewal=True) as s:
            await s.execute("record_worker", self._p(name=name, slots=slots, busy=busy, now=now))

    async def forget_worker(self, name: str) -> None:
        """One delete."""
        async with self._d.write() as s:
            await s.execute("forget_worker", self._p(name=name))

    async def compact_metrics(self) -> int:
        """One statement: the rows of the writers gone, deleted and summed into one."""
        async with self._d.write() as s:
            [row] = await s.fetch("compact_metrics", {})
        return int(row["folded"])

    # --- deliveries ---------------------------------------------------------------------------

    async def next_outbox_due(self, kinds: Sequence[str]) -> datetime | None:
        """One index read per kind."""
        if not kinds:
            return None
        [row] = await self._read("next_outbox_due", kinds=list(kinds))
        return self.codec.time_in(row["due"])

    async def list_deliveries(self, flt: DeliveryFilter) -> list[DeliveryRecord]:
        """Filtered, newest first."""
        rows = await self._read(
            "list_deliveries",
            kind=flt.kind,
            state=flt.state,
            task_id=flt.task_id,
            tenant=flt.tenant,
            limit=flt.limit,
        )
        return [delivery_record_from_row(r, self.codec) for r in rows]

    async def get_delivery(
        self, delivery_id: int, tenant: str | None = None
    ) -> DeliveryRecord | None:
        """The row and its tries, read in one snapshot."""
        async with self._d.read() as s:
            rows = await s.fetch("get_delivery", self._p(id=delivery_id, tenant=tenant))
            if not rows:
                return None
            tries = await s.fetch("delivery_attempts", self._p(id=delivery_id))
        record = delivery_record_from_row(rows[0], self.codec)
        return replace(record, tries=tuple(delivery_attempt_from_row(t, self.codec) for t in tries))

    # --- notices and the audit trail ----------------------------------------------------------

    async def notify(self, channel: str, payload: str = "") -> None:
        """A notice now (listeners without push notifications see every commit anyway)."""
        if self.push_notifications:
            async with self._d.write() as s:
                await s.execute("notify", {"channel": channel, "payload": payload})

    def listen(self, channels: Sequence[str]) -> AbstractAsyncContextManager[AsyncIterator[Notice]]:
        """Notices on ``channels`` while the context is open."""
        return self._d.listen(channels)

    @asynccontextmanager
    async def audit_snapshot(self) -> AsyncIterator[AuditSnapshot]:
        """Task heads and events from one snapshot."""
        codec = self.codec
        queries = ("task_heads", "all_events", "event_numbers", "audit_anchors", "audit_guards")
        async with self._d.snapshot(*queries) as (
            head_rows,
            event_rows_,
            number_rows,
            anchor_rows,
            guard_rows,
        ):

            async def heads() -> AsyncIterator[TaskHead]:
                async for row in head_rows:
                    yield task_head_from_row(row, codec)

            async def events() -> AsyncIterator[StoredEvent]:
                async for row in event_rows_:
                    yield stored_event_from_row(row, codec)

            async def numbered() -> AsyncIterator[tuple[int, str]]:
                async for row in number_rows:
                    yield int(row["gseq"]), row["hash"]

            async def anchors() -> AsyncIterator[Anchor]:
                async for row in anchor_rows:
                    yield anchor_from_row(row, codec)

            async def guards() -> AsyncIterator[tuple[str, bool]]:
                async for row in guard_rows:
                    yield row["name"], row["enabled"] in ("O", "A")

            yield AuditSnapshot(heads(), events(), numbered(), anchors(), guards())

    async def anchor_audit(
        self, at: datetime, limit: int, page: int = ANCHOR_PAGE
    ) -> Anchor | None:
        """Read the last anchor and the events after it, up to the highest number no open
        transaction can still hold (at most ``limit`` numbers), and record the anchor after
        them. The events are read and folded ``page`` numbers at a time, the event loop let go
        between pages (a step of 100,000 numbers read at once held it for about 80 ms:
        ``benchmarks/anchor_stall.py``), outside any transaction: events are append-only, so
        numbers no open transaction can hold no longer change, and on SQLite writers need not
        wait for the fold. Only the recording takes the anchoring lock, and records the anchor
        only if the last one is still the one it follows (None when another process anchored
        meanwhile, as when there was nothing to cover)."""
        if page < 1:
            raise ValueError(f"page must be at least 1, not {page}")
        settled = await self._d.settled_number()
        async with self._d.read() as s:
            last = await self._last_anchor(s)
            after = 0 if last is None else last.count
            upto = min(settled, after + limit)
            if upto <= after:
                return None
            fold = AnchorFold(last)
            while fold.upto < upto:
                await self._fold_page(s, fold, min(upto, fold.upto + page))
        anchor = fold.anchor(at)
        async with self._d.transaction() as s:
            await s.fetch("lock_anchoring", {})
            since = await self._last_anchor(s)
            if (None if since is None else since.id) != (None if last is None else last.id):
                return None
            added = await s.fetch("add_anchor", self._p(**anchor_params(anchor)))
            return replace(anchor, id=int(added[0]["id"]))

    async def _last_anchor(self, s: Session) -> Anchor | None:
        rows = await s.fetch("last_anchor", {})
        return anchor_from_row(rows[0], self.codec) if rows else None

    async def _fold_page(self, s: Session, fold: AnchorFold, upto: int) -> None:
        """Fold the events numbered after ``fold.upto`` up to ``upto``."""
        span = {"after": fold.upto, "upto": upto}
        if self._d.joins_in_order:
            # The page's hashes joined in number order in one row. It serves when every number
            # is an event (count and hashes agree); else the rows.
            (joined,) = await s.fetch("events_hashed", span)
            hashes = joined["hashes"].split(",") if joined["hashes"] else []
            if joined["n"] == upto - fold.upto == len(hashes):
                fold.add(hashes, upto)
                return
        # Value tuples, not a dict per row.
        _, found = await s.fetch_table("events_numbered", span)
        fold.add([r[1] for r in found], upto, numbers=[r[0] for r in found])

    # --- leadership and pausing ---------------------------------------------------------------

    async def lead(self, name: str, holder: str, now: datetime, ttl_secs: float) -> int | None:
        """One upsert that holds only for the holder or over an expired lease."""
        params = self._p(
            name=name, holder=holder, now=now, expires_at=now + timedelta(seconds=ttl_secs)
        )
        async with self._d.write(renewal=True) as s:
            rows = await s.fetch("lead", params)
        return int(rows[0]["term"]) if rows else None

    async def resign(self, name: str, holder: str) -> None:
        """End our lease now."""
        async with self._d.write() as s:
            await s.execute("resign", {"name": name, "holder": holder})

    async def leader(self, name: str) -> LeaderInfo | None:
        """The lease row."""
        rows = await self._read("leader", name=name)
        return record_from_row(LeaderInfo, rows[0], self.codec) if rows else None

    async def pause(self, task_type: str, by: str, reason: str, now: datetime) -> None:
        """Insert the pause."""
        params = self._p(task_type=task_type, by=by, reason=reason, now=now)
        async with self._d.write() as s:
            await s.execute("pause", params)

    async def resume(self, task_type: str) -> bool:
        """Delete the pause; wake the scheduler and workers, whose work it held back."""
        async with self._d.write() as s:
            resumed = await s.execute("resume", {"task_type": task_type}) > 0
        if resumed:
            await self.notify(CHANNEL_PENDING, "resumed")
            await self.notify(CHANNEL_QUEUED, "resumed")
        return resumed

    async def paused(self) -> list[PausedType]:
        """Every pause."""
        return [record_from_row(PausedType, r, self.codec) for r in await self._read("paused")]

    # --- cron schedules (R18) -----------------------------------------------------------------

    async def insert_schedule(self, schedule: Schedule) -> bool:
        """Insert unless the name is taken in the tenant."""
        params = self._p(
            tenant=schedule.tenant,
            name=schedule.name,
            cron=schedule.cron,
            tz=schedule.tz,
            task=dump(schedule.task),
            catch_up=schedule.catch_up.value,
            next_at=schedule.next_at,
            created_by=schedule.created_by,
            now=schedule.created_at,
        )
        async with self._d.write() as s:
            return bool(await s.fetch("insert_schedule", params))

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        """By tenant and name."""
        rows = await self._read("list_schedules", tenant=tenant)
        return [record_from_row(Schedule, r, self.codec) for r in rows]

    async def delete_schedule(self, tenant: str, name: str) -> Schedule | None:
        """Delete and return the row."""
        async with self._d.write() as s:
            rows = await s.fetch("delete_schedule", {"tenant": tenant, "name": name})
        return record_from_row(Schedule, rows[0], self.codec) if rows else None

    async def due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        """One index read while nothing is due."""
        rows = await self._read("due_schedules", now=now, limit=limit)
        return [record_from_row(Schedule, r, self.codec) for r in rows]

    async def advance_schedule(
        self, schedule: Schedule, next_at: datetime, fired: datetime | None, now: datetime
    ) -> bool:
        """Guarded on the ``next_at`` the caller read."""
        params = self._p(
            tenant=schedule.tenant,
            name=schedule.name,
            expected=schedule.next_at,
            next_at=next_at,
            last_slot_at=fired,
            now=now,
        )
        async with self._d.write() as s:
            return await s.execute("advance_schedule", params) > 0

    # --- API tokens (R20) ---------------------------------------------------------------------

    async def insert_token(self, token: TokenRecord) -> bool:
        """Insert unless the name or prefix is taken."""
        params = self._p(
            id=token.id,
            name=token.name,
            prefix=token.prefix,
            secret_hash=token.secret_hash,
            role=token.role.value,
            tenant=token.tenant,
            created_at=token.created_at,
            created_by=token.created_by,
            expires_at=token.expires_at,
        )
        async with self._d.write() as s:
            return bool(await s.fetch("insert_token", params))

    async def token_by_prefix(self, prefix: str) -> TokenRecord | None:
        """One indexed read."""
        rows = await self._read("token_by_prefix", prefix=prefix)
        return record_from_row(TokenRecord, rows[0], self.codec) if rows else None

    async def list_tokens(self) -> list[TokenRecord]:
        """By name."""
        return [
            record_from_row(TokenRecord, r, self.codec) for r in await self._read("list_tokens")
        ]

    async def revoke_token(self, name: str, now: datetime) -> TokenRecord | None:
        """Guarded on not yet revoked."""
        async with self._d.write() as s:
            rows = await s.fetch("revoke_token", self._p(name=name, now=now))
        return record_from_row(TokenRecord, rows[0], self.codec) if rows else None
