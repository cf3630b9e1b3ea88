"""Contract of admission (R4, R11, R12): the set-wise ADMIT, and the counted, serialised
admission under limits inside a transaction (candidates, loads, rate buckets, chosen ids)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.domain.states import Action, TaskState, bulk_event
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import Bucket, ClaimParams, LoadRow, Room, Tx

from .conftest import (
    WORKER,
    admission_candidates,
    admit,
    claim,
    insert,
)


async def test_admit_queues_the_best_due_pending_tasks_in_order(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """admit takes up to ``limit`` due pending tasks, P0 first then priority then age,
    returns their ids in that order and writes each one's admit event; tasks not yet due or
    of a paused type stay pending."""
    low = await insert(rt, priority=3)
    high = await insert(rt, priority=1)
    p0 = await insert(rt, priority=0, idempotency_key="urgent")
    later = await insert(rt, run_after=clock.now() + timedelta(seconds=60))
    paused = await insert(rt, task_type="docs")
    await insert(rt, admitted=True)
    now = clock.now()
    assert await admit(store, 2, now, paused=["docs"]) == [p0.id, high.id]
    assert await admit(store, 10, now, paused=["docs"]) == [low.id]
    states = {t.id: t.state for t in await store.get_tasks([later.id, paused.id, p0.id])}
    assert states == {
        later.id: TaskState.PENDING,
        paused.id: TaskState.PENDING,
        p0.id: TaskState.QUEUED,
    }
    last = (await store.events(p0.id))[-1]
    assert (last.action, last.actor, last.to_state) == ("admit", "scheduler", TaskState.QUEUED)
    [t] = await store.get_tasks([p0.id])
    assert t.last_hash == last.hash and t.event_seq == last.seq == 2
    assert await admit(store, 10, now + timedelta(seconds=60)) == [paused.id, later.id]
    assert await admit(store, 10, now + timedelta(seconds=60)) == []


async def test_lock_admission_serialises_admitting_transactions(store: Store) -> None:
    """A transaction taking the admission turn waits until the one holding it has committed:
    the statement after its lock runs only then (PostgreSQL sends the lock with it)."""
    order: list[str] = []

    async def second() -> None:
        async with store.transaction() as tx:
            await tx.lock_admission()
            await tx.load_and_tenants(1)
            order.append("second")

    async with store.transaction() as tx:
        await tx.lock_admission()
        await tx.load_and_tenants(1)
        waiting = asyncio.ensure_future(second())
        await asyncio.sleep(0.2)
        order.append("first")
    await asyncio.wait_for(waiting, timeout=10)
    assert order == ["first", "second"]


async def test_admission_room_counts_admitted_work(store: Store, rt: Runtime) -> None:
    """Store.admission_room counts admitted work: queued and executing tasks, nothing else."""
    assert (await store.admission_room()).active == 0
    await insert(rt)
    await insert(rt, admitted=True)
    await insert(rt, admitted=True, task_type="run")
    await claim(store, 1, rt.clock.now(), task_types=["run"])
    assert (await store.admission_room()).active == 2


async def test_admission_room_tells_when_several_tenants_wait(store: Store, rt: Runtime) -> None:
    """Store.admission_room says whether any task is pending and whether more than one tenant
    has pending tasks: none, one tenant (with several tasks), two; another tenant's admitted
    work does not count."""

    async def pending_and_several() -> tuple[bool, bool]:
        room = await store.admission_room()
        return room.pending, room.several_tenants

    await insert(rt, tenant="c", admitted=True)
    assert await pending_and_several() == (False, False)
    await insert(rt, tenant="b")
    await insert(rt, tenant="b")
    assert await pending_and_several() == (True, False)
    await insert(rt, tenant="a")
    assert await pending_and_several() == (True, True)


async def tenants_of(tx: Tx, limit: int) -> list[str]:
    """The tenants ``Tx.load_and_tenants`` reads."""
    return (await tx.load_and_tenants(limit))[1]


async def load_of(tx: Tx) -> list[LoadRow]:
    """The admitted load ``Tx.load_and_tenants`` reads, in a stable order."""
    load = (await tx.load_and_tenants(10))[0]
    return sorted(load, key=lambda r: (r.tenant, r.agent or ""))


async def test_pending_tenants_lists_tenants_with_pending_work(store: Store, rt: Runtime) -> None:
    """Tx.load_and_tenants returns each tenant with pending tasks once, in tenant order, up to
    the limit, and beside them the admitted load (here one queued task of tenant c)."""
    await insert(rt, tenant="b")
    await insert(rt, tenant="a")
    await insert(rt, tenant="a")
    await insert(rt, tenant="c", admitted=True)
    async with store.transaction() as tx:
        assert await tenants_of(tx, 10) == ["a", "b"]
        assert len(await tenants_of(tx, 1)) == 1
        assert await tenants_of(tx, 0) == []
        assert await load_of(tx) == [LoadRow("c", None, 1)]


async def test_a_claim_that_admits_takes_queued_tasks_then_pending_ones_within_the_cap(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """With ``max_active`` (a claim that admits), the claim takes the queued tasks it may
    first, then the best pending ones of its types, as many as leave at most that many queued
    and executing, each with an admit event and a claim event by the worker; a full cap
    leaves the rest pending."""
    await insert(rt, admitted=True, task_type="run")
    await claim(store, 1, clock.now(), task_types=["run"])  # one executing, another type
    queued = await insert(rt, admitted=True, priority=6)
    waiting = [await insert(rt, priority=p) for p in (1, 2, 3, 4)]
    now = clock.now()
    got = await claim(store, 10, now, task_types=["bugfix"], max_active=4)
    # The room: 4 - 1 executing - 1 queued = 2; the queued one first, in claim order after.
    assert [t.id for t in got] == [waiting[0].id, waiting[1].id, queued.id]
    assert {t.state for t in got} == {TaskState.EXECUTING}
    for task in got[:2]:
        events = await store.events(task.id)
        assert [(e.action, e.actor, e.seq) for e in events[1:]] == [
            (Action.ADMIT, WORKER, 2),
            (Action.CLAIM, WORKER, 3),
        ]
        assert task.event_seq == 3 and task.last_hash == events[-1].hash
    assert await claim(store, 10, now, task_types=["bugfix"], max_active=4) == []
    states = {t.id: t.state for t in await store.get_tasks([w.id for w in waiting])}
    assert [states[w.id] for w in waiting[2:]] == [TaskState.PENDING, TaskState.PENDING]
    [more] = await claim(store, 10, now, task_types=["bugfix"], max_active=5)
    assert more.id == waiting[2].id


async def test_a_claim_that_admits_takes_a_pending_p0_task_before_a_queued_one(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Claim order runs across queued and pending tasks (R4, R11): a P0 task that waits in
    pending goes before a task queued again (as a preempted one is), room allowing."""
    queued = await insert(rt, admitted=True, priority=8)
    p0 = await insert(rt, priority=0, idempotency_key="urgent")
    now = clock.now()
    [first] = await claim(store, 1, now, max_active=10)
    assert first.id == p0.id
    [second] = await claim(store, 1, now, max_active=10)
    assert second.id == queued.id


async def test_a_claim_that_admits_takes_only_what_it_may_claim(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """It admits no more than its limit leaves beside the queued tasks it takes, and no
    pending task of another type, of a paused type, or not yet due."""
    queued = [await insert(rt, admitted=True) for _ in range(2)]
    pending = [await insert(rt) for _ in range(3)]
    other = await insert(rt, task_type="docs")
    paused = await insert(rt, task_type="ops")
    later = await insert(rt, run_after=clock.now() + timedelta(hours=1))
    now = clock.now()
    got = await claim(store, 3, now, task_types=["bugfix"], max_active=100)
    assert [t.id for t in got] == [queued[0].id, queued[1].id, pending[0].id]
    got = await claim(store, 10, now, task_types=["bugfix", "ops"], paused=["ops"], max_active=100)
    assert [t.id for t in got] == [pending[1].id, pending[2].id]
    states = {t.id: t.state for t in await store.get_tasks([other.id, paused.id, later.id])}
    assert set(states.values()) == {TaskState.PENDING}


async def test_a_claim_that_admits_for_one_tenant_admits_none_while_several_wait(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """With ``one_tenant`` (fair share weighs several tenants in the planner), the claim takes
    no pending task while more than one tenant has some, and takes them while one has; the
    queued tasks it takes as ever."""
    a = await insert(rt, tenant="a")
    b = await insert(rt, tenant="b")
    c = await insert(rt, tenant="c", admitted=True)
    now = clock.now()
    got = await claim(store, 10, now, max_active=10, one_tenant=True)
    assert [t.id for t in got] == [c.id]
    [first] = await claim(store, 1, now, max_active=10)
    assert first.id == a.id
    [second] = await claim(store, 10, now, max_active=10, one_tenant=True)
    assert second.id == b.id


async def test_claim_next_claims_inside_the_transaction(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.claim_next claims like Store.claim (claim order, limit, types) within the
    transaction that admitted the tasks, and its writes roll back with it. Its answer can be
    asked for inside the transaction, and arrives with the COMMIT otherwise."""
    low = await insert(rt, priority=3)
    high = await insert(rt, priority=1)
    docs = await insert(rt, task_type="docs")
    now = clock.now()
    params = ClaimParams(
        5, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0, task_types=["bugfix"]
    )
    ids, admitting = [low.id, high.id, docs.id], bulk_event(Action.ADMIT, now, "scheduler")
    try:
        async with store.transaction() as tx:
            await tx.admit_ids(ids, now, admitting)
            claimed = await (await tx.claim_next(params)).get()
            assert [t.id for t in claimed] == [high.id, low.id]
            assert all(t.state is TaskState.EXECUTING and t.lock_token for t in claimed)
            raise LookupError
    except LookupError:
        pass
    assert await store.count_by_state() == {TaskState.PENDING: 3}
    async with store.transaction() as tx:
        await tx.admit_ids(ids, now, admitting)
        later = await tx.claim_next(replace(params, limit=1))
    [got] = later.result()
    [t] = await store.get_tasks([high.id])
    assert got.id == high.id and t.state is TaskState.EXECUTING and t.assigned_to == "w1"
    assert [e.action for e in await store.events(high.id)] == ["submit", "admit", "claim"]


async def test_active_load_groups_admitted_work_by_tenant_and_agent(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.load_and_tenants counts queued and executing tasks per (tenant, agent), inside the
    transaction (what it admitted included)."""
    async with store.transaction() as tx:
        assert await load_of(tx) == []
    a1 = await insert(rt, tenant="a")
    a2 = await insert(rt, tenant="a")
    await insert(rt, tenant="a", admitted=True)
    await insert(rt, tenant="b")
    now = clock.now()
    async with store.transaction() as tx:
        event = bulk_event(Action.ADMIT, now, "s", "alice")
        assert set(await (await tx.admit_ids([a1.id, a2.id], now, event, "alice")).get()) == {
            a1.id,
            a2.id,
        }
        load = await load_of(tx)
    assert load == [LoadRow("a", None, 1), LoadRow("a", "alice", 2)]
    read = sorted(await store.active_load(), key=lambda r: (r.tenant, r.agent or ""))
    assert read == load  # Store.active_load: the same counts, read outside a transaction


async def test_admission_candidates_per_tenant_and_level_with_skips(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.admission_candidates returns up to ``per_tenant`` due pending tasks of each priority
    level of the named tenants, oldest first within a level; paused types are left out, and
    skipped types unless the task names an assignee or is P0."""
    now = clock.now()
    a = [await insert(rt, tenant="a", priority=2) for _ in range(3)]
    a_p1 = await insert(rt, tenant="a", priority=1, labels=["l1", "l2"], assignee="bob")
    await insert(rt, tenant="a", run_after=now + timedelta(seconds=60))
    await insert(rt, tenant="a", task_type="docs")
    b = await insert(rt, tenant="b")
    await insert(rt, tenant="c")
    full = await insert(rt, tenant="d", task_type="full")
    named = await insert(rt, tenant="d", task_type="full", assignee="alice")
    urgent = await insert(rt, tenant="d", task_type="full", priority=0, idempotency_key="u")
    async with store.transaction() as tx:
        got = await admission_candidates(tx, now, ["a", "b"], 2, paused=["docs"])
        assert sorted(c.id for c in got) == sorted([a[0].id, a[1].id, a_p1.id, b.id])
        [cand] = [c for c in got if c.id == a_p1.id]
        assert (cand.tenant, cand.task_type, cand.priority, cand.seq) == (
            "a",
            "bugfix",
            1,
            a_p1.seq,
        )
        assert cand.eligible_at == a_p1.eligible_at and cand.kind == "task"
        assert (cand.labels, cand.assignee) == (("l1", "l2"), "bob")
        skipped = await admission_candidates(tx, now, ["d"], 5, skip_types=["full"])
        assert sorted(c.id for c in skipped) == sorted([named.id, urgent.id])
        assert full.id not in {c.id for c in skipped}
        assert await admission_candidates(tx, now, [], 5) == []


async def test_rate_buckets_round_trip_and_unknown_ones_are_absent(
    store: Store, clock: ManualClock
) -> None:
    """Tx.save_rate_buckets stores buckets (overwriting earlier ones); Tx.rate_buckets returns
    the stored ones among the names asked for."""
    now = clock.now()
    async with store.transaction() as tx:
        assert await tx.rate_buckets(["x"]) == {}
        await tx.save_rate_buckets({"x": Bucket(2.5, now), "y": Bucket(0.0, now)})
        await tx.save_rate_buckets({})
    later = now + timedelta(seconds=3)
    async with store.transaction() as tx:
        await tx.save_rate_buckets({"x": Bucket(1.25, later)})
    async with store.transaction() as tx:
        got = await tx.rate_buckets(["x", "y", "z"])
        assert got == {"x": Bucket(1.25, later), "y": Bucket(0.0, now)}
        assert await tx.rate_buckets([]) == {}


async def test_admit_ids_admits_only_pending_due_tasks_with_the_agent(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.admit_ids queues the ids still pending and due, recording the routed agent on the
    row and in the event; others (queued, not due, unknown) are left out."""
    now = clock.now()
    due = await insert(rt)
    queued = await insert(rt, admitted=True)
    later = await insert(rt, run_after=now + timedelta(seconds=60))
    event = bulk_event(Action.ADMIT, now, "scheduler", "alice")
    async with store.transaction() as tx:
        ids = [due.id, queued.id, later.id, uuid.uuid4()]
        assert await (await tx.admit_ids(ids, now, event, "alice")).get() == [due.id]
        assert await (await tx.admit_ids([], now, event)).get() == []
    [t] = await store.get_tasks([due.id])
    assert t.state is TaskState.QUEUED and t.agent == "alice"
    last = (await store.events(due.id))[-1]
    assert last.data == {"agent": "alice"} and last.hash == t.last_hash
    assert len(await store.events(queued.id)) == 2


async def test_admit_ids_answers_in_the_order_asked_all_or_some_written(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.admit_ids gives the ids it admitted in the order it was given them (the planner's
    order, best first), whether it wrote every one or left some out; many ids go as one
    parameter."""
    now = clock.now()
    tasks = [await insert(rt) for _ in range(5)]
    queued = await insert(rt, admitted=True)
    event = bulk_event(Action.ADMIT, now, "scheduler")
    a, b, c, d, e = (t.id for t in tasks)
    async with store.transaction() as tx:
        assert await (await tx.admit_ids([c, a, e], now, event)).get() == [c, a, e]
        got = await (await tx.admit_ids([d, queued.id, uuid.uuid4(), c, b], now, event)).get()
        assert got == [d, b]  # c is queued by now, the others never were pending
    states = {t.id: t.state for t in await store.get_tasks([a, b, c, d, e])}
    assert set(states.values()) == {TaskState.QUEUED}
    many = [await insert(rt) for _ in range(300)]
    order = [t.id for t in reversed(many)]
    async with store.transaction() as tx:
        assert await (await tx.admit_ids(order, now, event)).get() == order


async def test_preemptible_counts_long_running_low_priority_work_by_agent(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.preemptible counts executing tasks routed to an agent, of at least ``min_priority``,
    started no later than ``before``."""
    start = clock.now()
    for priority in (3, 3, 1):
        task = await insert(rt, priority=priority, task_type="run")
        async with store.transaction() as tx:
            event = bulk_event(Action.ADMIT, start, "s", "alice")
            await (await tx.admit_ids([task.id], start, event, "alice")).get()
    await insert(rt, admitted=True, task_type="run")  # no agent: never counted
    await claim(store, 10, start, agents=["alice"])
    async with store.transaction() as tx:
        assert await tx.preemptible(start, 2) == {"alice": 2}
        assert await tx.preemptible(start, 1) == {"alice": 3}
        assert await tx.preemptible(start - timedelta(seconds=1), 1) == {}


async def test_note_waiting_records_why_and_sets_pending_tasks_aside(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.note_waiting sets a pending task's state_reason without a state change or event and
    keeps it out of admission_candidates until ``until``; a task no longer pending is left as
    it is."""
    now = clock.now()
    parked = await insert(rt)
    queued = await insert(rt, admitted=True)
    until = now + timedelta(seconds=30)
    async with store.transaction() as tx:
        await tx.note_waiting({parked.id: "no agent serves bugfix", queued.id: "x"}, until)
        await tx.note_waiting({}, until)
    [p, q] = sorted(await store.get_tasks([parked.id, queued.id]), key=lambda t: t.seq)
    assert p.state is TaskState.PENDING and p.state_reason == "no agent serves bugfix"
    assert p.event_seq == 1 and len(await store.events(parked.id)) == 1
    assert q.state_reason is None
    async with store.transaction() as tx:
        assert await admission_candidates(tx, now, ["default"], 5) == []
        back = await admission_candidates(tx, until, ["default"], 5)
        assert [c.id for c in back] == [parked.id]


async def test_the_room_read_answers_admitted_work_pending_and_tenants_together(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Store.admission_room (a scheduler's hint when claims admit) answers all three in one
    read: admitted work, whether any task is pending, whether several tenants have some."""
    assert await store.admission_room() == Room(0, False, False)
    await insert(rt, admitted=True)
    await insert(rt, tenant="a")
    assert await store.admission_room() == Room(1, True, False)
    await insert(rt, tenant="b")
    assert await store.admission_room() == Room(1, True, True)
