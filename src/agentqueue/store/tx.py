"""The operations inside one write transaction (base.Tx), written once over a Dialect's
session."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from ..domain.audit import Anchor
from ..domain.deliveries import Delivery
from ..domain.models import LogRecord, Task
from ..domain.priority import order_key
from ..domain.states import BulkEvent, TaskState
from .base import (
    AdmitParams,
    Bucket,
    Candidate,
    CandidateQuery,
    Change,
    ClaimAdmission,
    ClaimParams,
    DeliveryResult,
    IntakeSource,
    Later,
    LoadRow,
    NewTask,
    OutboxRow,
    Purge,
    routed_payload,
)
from .dialect import Dialect, Session
from .rows import (
    Codec,
    Row,
    anchor_params,
    bucket_rows,
    change_rows,
    delivery_rows,
    dump,
    event_rows,
    load_rows,
    log_rows,
    new_task_rows,
    outbox_from_row,
    outbox_rows,
    purge_rows,
    record_from_row,
    records_from_table,
    tasks_from_table,
)


class QueryOps:
    """What a transaction and the store share: parameters through the codec, task rows read
    back, and CLAIM and ADMIT (each a statement of its own, or a step of admission's
    transaction)."""

    codec: Codec

    def _p(self, **values: Any) -> dict[str, Any]:
        return self.codec.params(**values)

    async def _tasks(self, s: Session, query: str, **values: Any) -> list[Task]:
        names, rows = await s.fetch_table(query, self._p(**values))
        return tasks_from_table(names, rows, self.codec)

    async def _insert_tasks(self, s: Session, new: Sequence[NewTask]) -> dict[UUID, int]:
        if not new:
            return {}
        rows = dump(new_task_rows(new, self.codec))
        events = dump(event_rows([e for n in new for e in n.events], self.codec))
        found = await s.fetch("insert_tasks", {"rows": rows, "events": events})
        return {self.codec.uuid(row["id"]): row["seq"] for row in found}

    def _claim_values(self, p: ClaimParams) -> dict[str, Any]:
        values = self._p(
            paused=list(p.paused),
            limit=p.limit,
            task_types=list(p.task_types) if p.task_types is not None else None,
            agents=list(p.agents) if p.agents is not None else None,
            now=p.now,
            worker=p.event.actor,
            tail=p.event.tail,
            data=p.event.data_text,
        )
        values.update(self.codec.durations(aging=p.aging_secs, ttl=p.ttl_secs, grace=p.grace_secs))
        if p.admit is not None:
            values.update(admit_tail=p.admit.event.tail, admit_data=p.admit.event.data_text)
        return values

    def _claimed(
        self, table: tuple[list[str], Sequence[Sequence[Any]]], p: ClaimParams, orders_in_sql: bool
    ) -> list[Task]:
        tasks = tasks_from_table(table[0], table[1], self.codec)
        if not orders_in_sql:
            tasks.sort(
                key=lambda t: order_key(t.priority, t.eligible_at, t.seq, p.now, p.aging_secs)
            )
        return tasks

    def _admit_values(self, p: AdmitParams) -> dict[str, Any]:
        params = self._p(
            paused=list(p.paused),
            limit=p.limit,
            now=p.now,
            actor=p.event.actor,
            tail=p.event.tail,
            data=p.event.data_text,
        )
        params.update(self.codec.durations(aging=p.aging_secs))
        return params

    def _admitted(self, rows: list[Row], p: AdmitParams, orders_in_sql: bool) -> list[UUID]:
        if not orders_in_sql:
            at = self.codec.at
            rows.sort(
                key=lambda r: order_key(
                    r["priority"], at(r["eligible_at"]), r["seq"], p.now, p.aging_secs
                )
            )
        return [self.codec.uuid(row["id"]) for row in rows]


class SQLTx(QueryOps):
    """Operations inside one write transaction (base.Tx)."""

    def __init__(self, session: Session, dialect: Dialect) -> None:
        self._s = session
        self._dialect = dialect
        self.codec = dialect.codec
        self._relaxed = False
        """The admission lock relaxed this transaction's commit."""

    async def lock(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """The tasks with these ids, locked."""
        return await self._tasks(
            self._s, "lock_tasks", ids=self.codec.uuids_param(ids), tenant=tenant
        )

    async def replies(self, tenant: str, ids: Sequence[UUID]) -> list[Task]:
        """The replies to these tasks (read, not locked)."""
        return await self._tasks(self._s, "replies", tenant=tenant, ids=self.codec.uuids_param(ids))

    async def lock_lapsed(self, limit: int, now: datetime) -> list[Task]:
        """Executing tasks whose lease ran out."""
        return await self._tasks(self._s, "lock_lapsed", limit=limit, now=now)

    async def lock_due_retries(self, limit: int, now: datetime) -> list[Task]:
        """Retrying tasks whose backoff elapsed."""
        return await self._tasks(self._s, "lock_due_retries", limit=limit, now=now)

    async def apply(self, changes: Sequence[Change]) -> set[UUID]:
        """Guarded bulk update with the events of the rows written."""
        if not changes:
            return set()
        rows = change_rows(changes, self.codec)
        events = event_rows([c.event for c in changes], self.codec)
        found = await self._s.fetch("apply", {"rows": dump(rows), "events": dump(events)})
        return {self.codec.uuid(row["id"]) for row in found}

    async def insert_logs(self, records: Sequence[LogRecord]) -> None:
        """Bulk insert of captured output."""
        if records:
            await self._s.execute("insert_logs", {"rows": dump(log_rows(records, self.codec))})

    async def notify(self, channel: str, payload: str = "") -> None:
        """A notice at commit (listeners without push notifications see the commit itself)."""
        if self._dialect.push_notifications:
            await self._s.execute("notify", {"channel": channel, "payload": payload})

    async def lock_dependents_ready(self, limit: int) -> list[Task]:
        """Held tasks whose dependencies settled."""
        return await self._tasks(self._s, "lock_dependents_ready", limit=limit)

    async def task_states(self, ids: Sequence[UUID]) -> dict[UUID, TaskState]:
        """States by id."""
        rows = await self._s.fetch("task_states", self._p(ids=self.codec.uuids_param(ids)))
        return {self.codec.uuid(r["id"]): TaskState(r["state"]) for r in rows}

    # --- admission ------------------------------------------------------------------------

    async def lock_admission(self, relaxed: bool = True) -> None:
        """One admitter under limits at a time; ``relaxed``, its commit need not wait."""
        self._relaxed = relaxed
        await self._s.lock_admission(relaxed)

    async def claim_next(self, params: ClaimParams) -> Later[list[Task]]:
        """The store's CLAIM, inside this transaction, sent later (at the latest with the
        COMMIT); a transaction that claims commits durably, even if its admission was relaxed
        (attempts start as it commits)."""
        if self._relaxed:
            await self._s.commit_durably()
            self._relaxed = False
        if params.admit is not None:
            admitting = await self._admitting_claim(params, params.admit)
            return admitting.map(lambda t: self._claimed(t, params, False))
        table = await self._s.fetch_table_later("claim", self._claim_values(params))
        orders_in_sql = self._dialect.orders_in_sql
        return table.map(lambda t: self._claimed(t, params, orders_in_sql))

    async def _admitting_claim(
        self, p: ClaimParams, admit: ClaimAdmission
    ) -> Later[tuple[list[str], list[Sequence[Any]]]]:
        """A claim that admits (``p.admit``): the admission lock (kept to the end of this
        transaction), the dialect's step that takes the room the cap leaves, then its claim,
        all sent later (at the latest with the COMMIT); the claimed rows come back unordered."""
        s = self._s
        await s.lock_admission(relaxed=False)
        values = self._claim_values(p)
        first, claim = self._dialect.admitting_claim
        # The first step's events are the ADMIT's: its actor, tail and data.
        room = {**values, "max_active": admit.max_active, "one_tenant": admit.one_tenant}
        room.update(actor=admit.event.actor, tail=admit.event.tail, data=admit.event.data_text)
        await s.fetch_later(first, room)
        return await s.fetch_table_later(claim, values)

    async def admit_ids(
        self,
        ids: Sequence[UUID],
        now: datetime,
        event: BulkEvent,
        agent: str | None = None,
        notify: bool = True,
    ) -> Later[list[UUID]]:
        """ADMIT the chosen rows still pending, with their events; sent later."""
        if not ids:
            return Later.now([])
        params = self._p(
            notify=notify,
            to=routed_payload([agent]),
            agent=agent,
            ids=self.codec.uuids_param(ids),
            now=now,
            actor=event.actor,
            tail=event.tail,
            data=event.data_text,
        )
        rows = await self._s.fetch_later("admit_ids", params)
        uuid = self.codec.uuid

        def admitted(found: list[Row]) -> list[UUID]:
            if len(found) == len(ids):
                return list(ids)  # as many rows as ids: each was written, in this order
            written = {uuid(r["id"]) for r in found}
            return [i for i in ids if i in written]

        return rows.map(admitted)

    async def notify_queued(self, agents: Iterable[str | None]) -> None:
        """Announce queued work at commit if any task is queued; sent later."""
        await self._s.fetch_later("notify_queued", {"to": routed_payload(agents)})

    async def note_waiting(self, reasons: Mapping[UUID, str], until: datetime) -> None:
        """One statement for all."""
        if reasons:
            rows = dump([{"id": str(i), "reason": r} for i, r in reasons.items()])
            await self._s.execute("note_waiting", self._p(rows=rows, until=until))

    async def load_and_tenants(self, limit: int) -> tuple[list[LoadRow], list[str]]:
        """Admitted work by tenant and agent, and the tenants with pending tasks, together."""
        load, tenants = await self._s.fetch_each(
            [("active_load", None), ("pending_tenants", {"limit": limit})]
        )
        return load_rows(load), [r["tenant"] for r in tenants]

    async def admission_candidates(self, query: CandidateQuery) -> Later[list[Candidate]]:
        """The heads of the tenants' priority levels."""
        params = self._p(
            now=query.now,
            tenants=list(query.tenants),
            per_tenant=query.per_tenant,
            paused=list(query.paused),
            skip_types=list(query.skip_types),
        )
        table = await self._s.fetch_table_later("admission_candidates", params)
        return table.map(lambda t: records_from_table(Candidate, t[0], t[1], self.codec))

    async def rate_buckets(self, names: Sequence[str]) -> dict[str, Bucket]:
        """Stored buckets, locked until commit."""
        rows = await self._s.fetch("rate_buckets", self._p(names=list(names)))
        return {r["name"]: record_from_row(Bucket, r, self.codec) for r in rows}

    async def save_rate_buckets(self, buckets: Mapping[str, Bucket]) -> None:
        """Upsert."""
        if buckets:
            rows = dump(bucket_rows(buckets, self.codec))
            await self._s.execute("save_rate_buckets", {"rows": rows})

    async def preemptible(self, before: datetime, min_priority: int) -> dict[str, int]:
        """One grouped count."""
        params = self._p(before=before, min_priority=min_priority)
        return {r["agent"]: int(r["n"]) for r in await self._s.fetch("preemptible", params)}

    # --- tools ----------------------------------------------------------------------------

    async def lock_tool_timeouts(self, now: datetime, limit: int) -> list[Task]:
        """Waiting tasks past their tool deadline."""
        return await self._tasks(self._s, "lock_tool_timeouts", now=now, limit=limit)

    async def lock_tool_work(self, names: Sequence[str], now: datetime, limit: int) -> list[Task]:
        """Waiting tasks with a call these tools can take."""
        return await self._tasks(
            self._s, "lock_tool_work", names=list(names), now_ts=now.timestamp(), limit=limit
        )

    async def set_tool_calls(self, task: Task, tool_calls: Sequence[Any]) -> bool:
        """Guarded by state and audit position."""
        params = self._p(id=task.id, expected_seq=task.event_seq, tool_calls=dump(list(tool_calls)))
        return bool(await self._s.fetch("set_tool_calls", params))

    # --- outbox and retention -------------------------------------------------------------

    async def enqueue_outbox(self, items: Sequence[Delivery]) -> int:
        """Insert the deliveries not already stored."""
        if not items:
            return 0
        rows = dump(outbox_rows(items, self.codec))
        return len(await self._s.fetch("enqueue_outbox", {"rows": rows}))

    async def lease_outbox(
        self, kind: str, now: datetime, limit: int, until: datetime, token: UUID | None = None
    ) -> list[OutboxRow]:
        """Pick due deliveries (skipping locked ones), lease them and push them to ``until``."""
        params = self._p(kind=kind, now=now, limit=limit, until=until, token=token or uuid4())
        rows = await self._s.fetch("lease_outbox", params)
        return sorted((outbox_from_row(r, self.codec) for r in rows), key=lambda r: r.id)

    async def record_deliveries(self, results: Sequence[DeliveryResult]) -> set[int]:
        """Keep the tries, then record them, in two statements (both fenced by the lease)."""
        if not results:
            return set()
        rows = dump(delivery_rows(results, self.codec))
        await self._s.execute("record_attempts", {"rows": rows})
        return {int(r["id"]) for r in await self._s.fetch("record_deliveries", {"rows": rows})}

    async def release_outbox(self, tokens: Sequence[UUID], now: datetime) -> int:
        """One statement."""
        if not tokens:
            return 0
        return len(await self._s.fetch("release_outbox", self._p(tokens=list(tokens), now=now)))

    async def retry_delivery(self, delivery_id: int, now: datetime, tenant: str | None) -> bool:
        """One guarded update."""
        params = self._p(id=delivery_id, now=now, tenant=tenant)
        return bool(await self._s.fetch("retry_delivery", params))

    async def lock_expired_dead_letters(
        self, limit: int, p0_before: datetime, other_before: datetime
    ) -> list[Task]:
        """Dead letters past retention, skipping rows other transactions hold."""
        return await self._tasks(
            self._s,
            "lock_expired_dead_letters",
            limit=limit,
            p0_before=p0_before,
            other_before=other_before,
            latest=max(p0_before, other_before),
        )

    async def purge(self, items: Sequence[Purge]) -> set[UUID]:
        """Guarded delete, with the last events and the captured output of the rows deleted."""
        if not items:
            return set()
        rows = dump(purge_rows(items, self.codec))
        events = dump(event_rows([p.event for p in items], self.codec))
        found = await self._s.fetch("purge", {"rows": rows, "events": events})
        return {self.codec.uuid(row["id"]) for row in found}

    async def record_audit(self, record: Anchor) -> int:
        """One insert."""
        found = await self._s.fetch("add_anchor", self._p(**anchor_params(record)))
        return int(found[0]["id"])

    # --- GitHub intake (R18) --------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str, event: str, at: datetime) -> bool:
        """One insert that skips a recorded id."""
        params = self._p(delivery_id=delivery_id, event=event, received_at=at)
        return bool(await self._s.fetch("claim_intake_delivery", params))

    async def delivery_answer(self, delivery_id: str) -> dict[str, Any] | None:
        """One read by key."""
        rows = await self._s.fetch("intake_delivery_answer", {"delivery_id": delivery_id})
        if not rows:
            return None
        answer = self.codec.json_in(rows[0]["answer"])
        return dict(answer) if isinstance(answer, dict) else {}

    async def record_delivery_answer(self, delivery_id: str, answer: Mapping[str, Any]) -> None:
        """One update by key."""
        params = {"delivery_id": delivery_id, "answer": dump(dict(answer))}
        await self._s.execute("record_intake_answer", params)

    async def lock_intake_source(self, tenant: str, source: str, source_id: str) -> IntakeSource:
        """An upsert that returns (and, on PostgreSQL, locks) the row."""
        params = {"tenant": tenant, "source": source, "source_id": source_id}
        [row] = await self._s.fetch("lock_intake_source", params)
        return record_from_row(IntakeSource, row, self.codec)

    async def save_intake_source(self, state: IntakeSource) -> None:
        """One update by key."""
        params = self._p(
            tenant=state.tenant,
            source=state.source,
            source_id=state.source_id,
            state=state.state,
            state_at=state.state_at,
            head_sha=state.head_sha,
            head_at=state.head_at,
        )
        await self._s.execute("save_intake_source", params)

    async def lock_live_by_source(self, tenant: str, source: str, source_id: str) -> list[Task]:
        """Live tasks of one source, locked."""
        return await self._tasks(
            self._s, "lock_live_by_source", tenant=tenant, source=source, source_id=source_id
        )

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """The store's insert, as a step of this transaction."""
        return await self._insert_tasks(self._s, new)
