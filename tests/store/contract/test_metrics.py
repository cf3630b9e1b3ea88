"""Contract of the metrics reads and the workers' slot rows: a completion is counted by the
database in the transaction that records it, the live depth follows each task, and a worker's
row is kept, replaced and forgotten."""

from __future__ import annotations

from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.domain.states import Action, TaskState, bulk_event
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import MetricSnapshot

from .conftest import WORKER, claimed, insert


def _ended(snapshot: MetricSnapshot, label: str) -> int:
    return sum(c.n for c in snapshot.counts if c.metric == "ended" and c.label == label)


async def test_metrics_count_each_completion_and_the_live_depth(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """One pending task and one completed: depth pending 1 (executing back to 0 after the
    completion), the completion counted once under 'completed' and in the completion-time
    histogram, each by tenant when asked."""
    before = await store.metrics()
    await insert(rt, tenant="t1")
    task = await claimed(rt, tenant="t2")
    running = await store.metrics()
    assert running.depth.get(("", TaskState.EXECUTING), 0) == 1
    assert task.lock_token is not None
    clock.advance(3)
    now = clock.now()
    event = bulk_event(Action.COMPLETE, now, WORKER)
    assert await store.complete([(task.id, task.lock_token, None)], now, event)
    after = await store.metrics()
    assert after.depth.get(("", TaskState.PENDING), 0) == 1
    assert after.depth.get(("", TaskState.EXECUTING), 0) == 0
    assert _ended(after, "completed") - _ended(before, "completed") == 1
    completions = [c for c in after.counts if c.metric == "completion"]
    assert sum(c.n for c in completions) == 1 and abs(sum(c.total for c in completions) - 3) < 1e-6
    split = await store.metrics(by_tenant=True)
    assert split.depth.get(("t1", TaskState.PENDING), 0) == 1
    assert split.depth.get(("t2", TaskState.PENDING), 0) == 0


async def test_record_worker_keeps_one_row_per_worker_until_forgotten(
    store: Store, clock: ManualClock
) -> None:
    """record_worker inserts, then replaces, a worker's slots and heartbeat; forget_worker
    removes only that worker's row."""
    now = clock.now()
    await store.record_worker("w-a", 8, 3, now)
    await store.record_worker("w-b", 4, 0, now)
    later = now + timedelta(seconds=2)
    await store.record_worker("w-a", 8, 5, later)
    rows = {w.name: w for w in (await store.metrics()).workers}
    assert set(rows) == {"w-a", "w-b"}
    assert (rows["w-a"].slots, rows["w-a"].busy, rows["w-a"].heartbeat_at) == (8, 5, later)
    await store.forget_worker("w-a")
    assert [w.name for w in (await store.metrics()).workers] == ["w-b"]


async def test_compact_metrics_keeps_every_figure_and_folds_nothing_twice(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Folding the rows of writers that are gone changes no figure a scrape reads (this store's
    own connections are alive, so their rows stay; tests/store/test_metrics_rollup.py folds
    those of a closed queue), and what was folded is not folded again."""
    await insert(rt)
    task = await claimed(rt)
    assert task.lock_token is not None
    now = clock.now()
    await store.complete(
        [(task.id, task.lock_token, None)], now, bulk_event(Action.COMPLETE, now, WORKER)
    )
    before = await store.metrics()
    await store.compact_metrics()
    after = await store.metrics()
    assert sorted(after.counts, key=repr) == sorted(before.counts, key=repr)
    assert after.depth == before.depth
    assert await store.compact_metrics() == 0
