"""Contract of the outbox and dead-letter retention (R8): deliveries stored once, leased for one
try, recorded; dead letters past retention found and purged under a guard."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from agentqueue import ManualClock
from agentqueue.domain.deliveries import Delivery
from agentqueue.domain.models import LogRecord, Task
from agentqueue.domain.retention import RetentionPolicy, purge_event
from agentqueue.domain.states import TaskState
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import DeliveryFilter, DeliveryResult, OutboxRow, Purge

from .conftest import claimed, insert, lapse, snapshot


def item(task: Task, seq: int, at: datetime, kind: str = "alert") -> Delivery:
    """A delivery of ``kind`` for ``task`` at audit position ``seq``."""
    return Delivery(kind, task.id, task.tenant, seq, None, {"seq": seq}, at)


async def test_enqueue_outbox_stores_each_delivery_once(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """enqueue_outbox counts the new deliveries; one already stored for the same (kind, task,
    audit position) is skipped, also within one batch."""
    task = await insert(rt)
    now = clock.now()
    async with store.transaction() as tx:
        assert await tx.enqueue_outbox([item(task, 1, now), item(task, 2, now)]) == 2
        assert await tx.enqueue_outbox([]) == 0
    async with store.transaction() as tx:
        again = [
            item(task, 1, now),
            item(task, 3, now),
            item(task, 3, now),
            item(task, 1, now, "x"),
        ]
        assert await tx.enqueue_outbox(again) == 2
        rows = await tx.lease_outbox("alert", now, 10, now + timedelta(seconds=60))
    assert sorted(r.event_seq for r in rows) == [1, 2, 3]


async def test_lease_outbox_hands_out_due_deliveries_oldest_first_once(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """lease_outbox returns up to ``limit`` undelivered deliveries of the kind due at ``now``,
    oldest first, with their fields; a leased one is not handed out again before ``until``."""
    task = await insert(rt)
    now = clock.now()
    async with store.transaction() as tx:
        await tx.enqueue_outbox([item(task, 2, now + timedelta(seconds=1)), item(task, 1, now)])
        await tx.enqueue_outbox([item(task, 1, now, "callback")])
    until = now + timedelta(seconds=60)
    async with store.transaction() as tx:
        assert await tx.lease_outbox("alert", now - timedelta(seconds=1), 10, until) == []
        [first] = await tx.lease_outbox("alert", now + timedelta(seconds=1), 1, until)
    assert (first.kind, first.task_id, first.tenant, first.event_seq) == (
        "alert",
        task.id,
        task.tenant,
        1,
    )
    assert (first.url, first.body, first.attempts, first.created_at) == (None, {"seq": 1}, 0, now)
    async with store.transaction() as tx:
        rest = await tx.lease_outbox("alert", now + timedelta(seconds=1), 10, until)
        assert [r.event_seq for r in rest] == [2]
        assert await tx.lease_outbox("alert", now + timedelta(seconds=1), 10, until) == []
        again = await tx.lease_outbox("alert", until, 10, until + timedelta(seconds=60))
        assert sorted(r.event_seq for r in again) == [1, 2]


async def test_record_deliveries_counts_tries_and_retires_delivered_ones(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """record_deliveries counts each try; a delivered one is never leased again (and a later
    failure report leaves it delivered); a failed one is due again at its next_attempt_at."""
    task = await insert(rt)
    now = clock.now()
    async with store.transaction() as tx:
        await tx.enqueue_outbox([item(task, 1, now), item(task, 2, now)])
        ok, failed = await tx.lease_outbox("alert", now, 10, now)
    retry_at = now + timedelta(seconds=30)
    async with store.transaction() as tx:
        await tx.record_deliveries(
            [
                DeliveryResult(ok.id, now, True, lease_token=ok.lease_token),
                DeliveryResult(
                    failed.id, now, False, "HTTP 500", retry_at, lease_token=failed.lease_token
                ),
            ]
        )
        await tx.record_deliveries([])
    async with store.transaction() as tx:
        late = DeliveryResult(ok.id, now, False, "late", now, lease_token=ok.lease_token)
        assert await tx.record_deliveries([late]) == set()
    async with store.transaction() as tx:
        assert await tx.lease_outbox("alert", retry_at - timedelta(seconds=1), 10, now) == []
        [back] = await tx.lease_outbox("alert", retry_at + timedelta(days=1), 10, now)
    assert back.id == failed.id and back.attempts == 1


async def dead_letter(rt: Runtime, clock: ManualClock, **fields: object) -> Task:
    """A task whose only attempt lapsed: dead_letter at the clock's time."""
    task = await claimed(rt, max_retries=0, **fields)
    assert task.id in {t.id for t in await lapse(rt, clock)}
    [t] = await rt.store.get_tasks([task.id])
    assert t.state is TaskState.DEAD_LETTER
    return t


async def test_lock_expired_dead_letters_by_priority_cutoff_oldest_first(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.lock_expired_dead_letters returns dead letters that entered dead_letter at or before
    the cutoff of their priority (P0 or others), oldest first, up to the limit."""
    other = await dead_letter(rt, clock, worker="w1")
    p0 = await dead_letter(rt, clock, worker="w2", priority=0, idempotency_key="p0")
    await insert(rt)  # not a dead letter
    t_other, t_p0 = other.updated_at, p0.updated_at
    assert t_other < t_p0
    async with store.transaction() as tx:
        assert await tx.lock_expired_dead_letters(10, t_p0, t_other - timedelta(seconds=1)) == [p0]
        assert await tx.lock_expired_dead_letters(10, t_p0 - timedelta(seconds=1), t_other) == [
            other
        ]
        both = await tx.lock_expired_dead_letters(10, t_p0, t_p0)
        assert [t.id for t in both] == [other.id, p0.id]
        assert [t.id for t in await tx.lock_expired_dead_letters(1, t_p0, t_p0)] == [other.id]


async def test_purge_deletes_a_dead_letter_and_its_output_and_ends_its_chain(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """purge deletes each dead letter whose guard holds with its captured output and appends
    its purge event (earlier events stay); a purge decided on a stale audit position writes
    nothing."""
    gone = await dead_letter(rt, clock, worker="w1")
    kept = await dead_letter(rt, clock, worker="w2")
    async with store.transaction() as tx:
        await tx.insert_logs([LogRecord(gone.id, gone.tenant, 1, "stdout", clock.now(), "x")])
    policy = RetentionPolicy(p0_days=0, days=0)
    now = clock.now()
    stale = Purge(kept.id, kept.event_seq - 1, purge_event(kept, now, policy, "scheduler"))
    fresh = Purge(gone.id, gone.event_seq, purge_event(gone, now, policy, "scheduler"))
    before = await snapshot(store, kept.id)
    async with store.transaction() as tx:
        assert await tx.purge([fresh, stale]) == {gone.id}
        assert await tx.purge([]) == set()
    assert await store.get_tasks([gone.id]) == []
    assert await store.logs(gone.id) == []
    events = await store.events(gone.id)
    assert len(events) == gone.event_seq + 1 and events[-1] == fresh.event
    assert await snapshot(store, kept.id) == before


async def test_lease_outbox_skips_deliveries_another_transaction_holds(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Two deliverers leasing at once get different deliveries: a delivery leased in an open
    transaction is skipped by the other (or, on SQLite, the other waits and finds it leased)."""
    task = await insert(rt)
    now = clock.now()
    until = now + timedelta(seconds=60)
    async with store.transaction() as tx:
        await tx.enqueue_outbox([item(task, 1, now), item(task, 2, now)])

    async def other_deliverer() -> list[OutboxRow]:
        async with store.transaction() as tx:
            return await tx.lease_outbox("alert", now, 1, until)

    async with store.transaction() as tx:
        [first] = await tx.lease_outbox("alert", now, 1, until)
        other = asyncio.ensure_future(other_deliverer())
        done, _ = await asyncio.wait({other}, timeout=0.1 if store.dialect == "sqlite" else 5)
        if store.dialect != "sqlite":  # one writer at a time on SQLite: the other waits its turn
            assert done, "waited for a row another transaction holds instead of skipping it"
    [second] = await asyncio.wait_for(other, timeout=10)
    assert {first.event_seq, second.event_seq} == {1, 2}


async def test_lock_expired_dead_letters_skips_ones_another_purger_holds(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Two purgers at once take different dead letters: one locked by an open transaction is
    skipped (or, on SQLite, the other waits and finds it purged)."""
    a = await dead_letter(rt, clock, worker="w1")
    b = await dead_letter(rt, clock, worker="w2")
    now = clock.now()
    policy = RetentionPolicy(p0_days=0, days=0)

    async def other_purger() -> list[Task]:
        async with store.transaction() as tx:
            return await tx.lock_expired_dead_letters(1, now, now)

    async with store.transaction() as tx:
        [first] = await tx.lock_expired_dead_letters(1, now, now)
        other = asyncio.ensure_future(other_purger())
        done, _ = await asyncio.wait({other}, timeout=0.1 if store.dialect == "sqlite" else 5)
        if store.dialect != "sqlite":  # one writer at a time on SQLite: the other waits its turn
            assert done, "waited for a row another transaction holds instead of skipping it"
        purge = Purge(first.id, first.event_seq, purge_event(first, now, policy, "scheduler"))
        assert await tx.purge([purge]) == {first.id}
    [second] = await asyncio.wait_for(other, timeout=10)
    assert first.id == a.id and second.id == b.id


async def test_only_the_lease_holder_records_a_try(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """A deliverer whose lease lapsed (another took the delivery under a new token) records
    nothing, neither the try nor the outcome; the holder records both, and its try is kept with
    its status code and duration."""
    task = await insert(rt)
    now = clock.now()
    async with store.transaction() as tx:
        await tx.enqueue_outbox([item(task, 1, now, "callback")])
        [old] = await tx.lease_outbox("callback", now, 10, now + timedelta(seconds=5))
    later = now + timedelta(seconds=6)
    async with store.transaction() as tx:
        [new] = await tx.lease_outbox("callback", later, 10, later + timedelta(seconds=5))
    assert old.lease_token is not None and new.lease_token not in (None, old.lease_token)
    async with store.transaction() as tx:
        stale = DeliveryResult(old.id, later, True, lease_token=old.lease_token, status_code=200)
        assert await tx.record_deliveries([stale]) == set()
    record = await store.get_delivery(old.id)
    assert record is not None and record.state == "pending" and record.tries == ()
    async with store.transaction() as tx:
        fail = DeliveryResult(
            new.id,
            later,
            False,
            "HTTP 503",
            later,
            new.lease_token,
            status_code=503,
            duration_ms=12.5,
        )
        assert await tx.record_deliveries([fail]) == {new.id}
    record = await store.get_delivery(new.id)
    assert record is not None and record.attempts == 1 and record.last_status == 503
    assert [(t.status_code, t.duration_ms, t.error) for t in record.tries] == [
        (503, 12.5, "HTTP 503")
    ]
    assert not record.leased


async def test_release_retry_list_and_next_due(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """release_outbox makes leased deliveries due at once; a given-up delivery is never leased,
    until retry_delivery makes it due again (its tries kept); next_outbox_due and
    list_deliveries see all this."""
    task = await insert(rt)
    now = clock.now()
    later = now + timedelta(hours=1)
    async with store.transaction() as tx:
        await tx.enqueue_outbox([item(task, 1, now, "callback"), item(task, 2, now, "callback")])
        a, b = await tx.lease_outbox("callback", now, 10, later)
    assert await store.next_outbox_due(["callback"]) == later
    assert await store.next_outbox_due(["alert"]) is None
    async with store.transaction() as tx:
        assert a.lease_token is not None
        assert await tx.release_outbox([a.lease_token], now) == 2
        assert await tx.retry_delivery(a.id, now, None) is True
    assert await store.next_outbox_due(["callback", "alert"]) == now
    async with store.transaction() as tx:
        a, b = await tx.lease_outbox("callback", now, 10, later)
        assert await tx.retry_delivery(a.id, now, None) is False  # a lease holds it
        gave_up = DeliveryResult(a.id, now, False, "refused", None, a.lease_token, given_up=True)
        done = DeliveryResult(b.id, now, True, lease_token=b.lease_token, status_code=204)
        assert await tx.record_deliveries([gave_up, done]) == {a.id, b.id}
    async with store.transaction() as tx:
        assert await tx.lease_outbox("callback", later, 10, later) == []
    assert await store.next_outbox_due(["callback"]) is None
    assert [r.state for r in await store.list_deliveries(DeliveryFilter())] == [
        "delivered",
        "given_up",
    ]
    assert [r.id for r in await store.list_deliveries(DeliveryFilter(state="given_up"))] == [a.id]
    assert await store.list_deliveries(DeliveryFilter(tenant="elsewhere")) == []
    assert len(await store.list_deliveries(DeliveryFilter(task_id=task.id, kind="callback"))) == 2
    async with store.transaction() as tx:
        assert await tx.retry_delivery(a.id, now, "elsewhere") is False
        assert await tx.retry_delivery(a.id, now, task.tenant) is True
        assert await tx.retry_delivery(b.id, now, None) is False  # delivered
        [again] = await tx.lease_outbox("callback", now, 10, later)
    assert again.id == a.id and again.attempts == 1
    record = await store.get_delivery(a.id, task.tenant)
    assert record is not None and len(record.tries) == 1 and record.state == "pending"
    assert await store.get_delivery(a.id, "elsewhere") is None
