"""Contract of the dashboard's reads: tasks ended per time slot, the newest ended tasks' times,
workers holding executing tasks, the outbox backlog, and the agent and text filters of
list_tasks."""

from __future__ import annotations

from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.domain.deliveries import Delivery
from agentqueue.domain.states import Action, bulk_event
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store, TaskFilter
from agentqueue.store.base import DeliveryResult

from .conftest import WORKER, claimed, insert


async def _completed(rt: Runtime, clock: ManualClock, tenant: str = "t1") -> None:
    task = await claimed(rt, tenant=tenant)
    assert task.lock_token is not None
    clock.advance(2)
    now = clock.now()
    event = bulk_event(Action.COMPLETE, now, WORKER)
    assert await rt.store.complete([(task.id, task.lock_token, None)], now, event)


async def test_ended_counts_counts_ended_tasks_per_slot_and_state(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Each task that ended at or after ``since`` is counted once, in the slot its end falls
    in (slot 0 starts at ``since``), by its state and within the tenant asked for; one that
    ended before ``since`` is not counted."""
    await _completed(rt, clock)  # ends before since
    since = clock.now() + timedelta(seconds=1)
    clock.advance(10)
    await _completed(rt, clock)  # since + 11 s: slot 0 of 60 s
    clock.advance(60)
    await _completed(rt, clock)  # since + 73 s: slot 1
    await _completed(rt, clock, tenant="t2")  # slot 1, other tenant
    got = {(c.slot, c.state): c.count for c in await store.ended_counts(since, 60)}
    assert got == {(0, "completed"): 1, (1, "completed"): 2}
    mine = {(c.slot, c.state): c.count for c in await store.ended_counts(since, 60, "t1")}
    assert mine == {(0, "completed"): 1, (1, "completed"): 1}


async def test_ended_sample_gives_the_newest_ended_tasks_times(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """ended_sample returns creation, start and end of the newest ``limit`` tasks that ran and
    ended since ``since``, newest first."""
    since = clock.now()
    for _ in range(3):
        clock.advance(5)
        await _completed(rt, clock)
    sample = await store.ended_sample(since, 2)
    assert len(sample) == 2
    assert sample[0].finished_at > sample[1].finished_at
    for times in sample:
        assert times.created_at <= times.started_at < times.finished_at
        assert (times.finished_at - times.started_at) == timedelta(seconds=2)
    assert len(await store.ended_sample(since, 10, "nobody")) == 0


async def test_busy_workers_counts_each_workers_executing_tasks(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """busy_workers names each worker holding executing tasks, how many, and its latest
    heartbeat; a worker whose task ended is gone."""
    await claimed(rt, worker="w-a")
    await claimed(rt, worker="w-a")
    await claimed(rt, worker="w-b")
    busy = {w.worker: w for w in await store.busy_workers()}
    assert {name: w.executing for name, w in busy.items()} == {"w-a": 2, "w-b": 1}
    assert busy["w-a"].last_heartbeat is not None


async def test_outbox_backlog_counts_deliveries_not_yet_delivered(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """outbox_backlog counts deliveries neither delivered nor given up, in the tenant asked
    for."""
    task = await insert(rt, tenant="t1")
    now = clock.now()
    items = [Delivery("alert", task.id, task.tenant, seq, None, {}, now) for seq in (1, 2, 3)]
    async with store.transaction() as tx:
        await tx.enqueue_outbox(items)
        leased = await tx.lease_outbox("alert", now, 1, now + timedelta(seconds=60))
        await tx.record_deliveries(
            [DeliveryResult(leased[0].id, now, True, lease_token=leased[0].lease_token)]
        )
    assert await store.outbox_backlog() == 2
    assert await store.outbox_backlog("t1") == 2
    assert await store.outbox_backlog("t2") == 0


async def test_list_tasks_filters_by_agent_and_by_text_in_title_or_source_id(
    store: Store, rt: Runtime
) -> None:
    """``text`` matches the title or the source id whatever its case; ``agent`` the routed
    agent."""
    a = await insert(rt, title="Fix the Parser", source="issue", source_id="octo/repo#12")
    b = await insert(rt, title="docs", source="issue", source_id="octo/other#7")
    now = rt.clock.now()
    async with store.transaction() as tx:
        admitted = await (
            await tx.admit_ids([b.id], now, bulk_event(Action.ADMIT, now, "s"), "fixer")
        ).get()
    assert admitted == [b.id]
    by_text = await store.list_tasks(TaskFilter(text="PARSER"))
    assert [t.id for t in by_text] == [a.id]
    by_source = await store.list_tasks(TaskFilter(text="other#"))
    assert [t.id for t in by_source] == [b.id]
    assert [t.id for t in await store.list_tasks(TaskFilter(agent="fixer"))] == [b.id]
    assert await store.list_tasks(TaskFilter(agent="nobody")) == []
