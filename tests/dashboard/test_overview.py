"""The overview's figures on each backend, on a manual clock: tasks ended per slot in the hour
and day windows, latency percentiles per slot, and tenant scoping."""

from __future__ import annotations

from datetime import timedelta

from agentqueue import AsyncQueue, ManualClock, TaskState
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.service.overview import overview, percentile


async def _run(
    queue: AsyncQueue, clock: ManualClock, wait: float, run: float, **task: object
) -> None:
    """Submit a task, let it wait ``wait`` seconds, claim it, run it ``run`` seconds and
    complete it (or fail it for good with ``fail``)."""
    fail = bool(task.pop("fail", False))
    await queue.submit(title="t", task_type="docs", **task)
    await queue.admit()
    clock.advance(wait)
    [claimed] = await queue.claim(1, "w1")
    assert claimed.lock_token is not None
    clock.advance(run)
    kind = OutcomeKind.FAILED if fail else OutcomeKind.COMPLETED
    await queue.finish(
        [Outcome(claimed.id, claimed.lock_token, kind, error="x" if fail else None,
                 retryable=False, claimed=claimed)]
    )  # fmt: skip


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..4 is 2, p99 is the largest, none of nothing."""
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.99) == 4.0
    assert percentile([], 0.5) is None


async def test_windows_count_ended_tasks_per_slot_with_latencies(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """Tasks ended two hours ago count in the day window only; tasks ended in the last minutes
    count in the last slot of both, completed apart from other ends, with wait and run
    percentiles of their own slot; another tenant's tasks are left out when scoped."""
    await _run(queue, clock, 1, 2)  # ends ~3 s after the start
    clock.advance(7200)
    await _run(queue, clock, 4, 10)
    await _run(queue, clock, 2, 20)
    await _run(queue, clock, 1, 1, fail=True)
    await _run(queue, clock, 1, 1, tenant="other")
    for tenant in ("default", "other", "other"):  # live: in the depth, not in the windows
        await queue.submit(title="waits", task_type="docs", tenant=tenant)
    rt = await queue.runtime()
    seen = await overview(rt, "default")
    hour, day = seen.windows
    assert (hour.completed, hour.other_ends) == (2, 1)
    assert (day.completed, day.other_ends) == (3, 1)
    assert len(hour.slots) == 12 and len(day.slots) == 24
    last = hour.slots[-1]
    assert (last.completed, last.other_ends) == (2, 1)
    assert last.run_p99 == 20.0 and last.wait_p99 == 4.0
    assert sum(s.completed for s in day.slots[:-1]) == 1
    everyone = await overview(rt)
    assert everyone.windows[0].completed == 3
    assert everyone.depth[TaskState.PENDING] == 3 and seen.depth[TaskState.PENDING] == 1
    assert sum(seen.depth.values()) == 1 and TaskState.COMPLETED not in seen.depth
    assert everyone.ended["completed"] == 4 and seen.ended["completed"] == 3
    assert seen.leader is None and seen.outbox_backlog >= 0
    assert clock.now() - hour.since <= timedelta(hours=1, minutes=5)
