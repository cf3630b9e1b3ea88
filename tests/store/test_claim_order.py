"""R4 on each backend: lower priority number first, FIFO within one, aging by the injected clock,
and the P0 lane that no aged task enters; admission holds tasks back until run_after."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any
from uuid import UUID

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.domain.priority import order_key

MINUTE = 60.0


async def submit(queue: AsyncQueue, title: str, priority: int, **fields: Any) -> Task:
    if priority == 0:
        fields.setdefault("idempotency_key", f"key-{title}")
    result = await queue.submit(title=title, task_type="bugfix", priority=priority, **fields)
    assert result.created
    return result.task


async def claim_one_by_one(queue: AsyncQueue) -> list[str]:
    """Titles in the order single claims hand them out, until nothing is left."""
    titles = []
    while claimed := await queue.claim(1, "worker-1"):
        titles.append(claimed[0].title)
    return titles


async def test_claim_hands_out_lower_priority_numbers_first(queue: AsyncQueue) -> None:
    for title, priority in [("p7", 7), ("p3", 3), ("p9", 9), ("p1", 1), ("p5", 5), ("p0", 0)]:
        await submit(queue, title, priority)
    await queue.admit()
    assert await claim_one_by_one(queue) == ["p0", "p1", "p3", "p5", "p7", "p9"]


async def test_claim_is_fifo_within_one_priority(queue: AsyncQueue, clock: ManualClock) -> None:
    for i in range(6):
        await submit(queue, f"t{i}", 4)
        clock.advance(1)
    await queue.admit()
    assert await claim_one_by_one(queue) == [f"t{i}" for i in range(6)]


async def test_claim_is_fifo_by_submission_order_when_submitted_at_the_same_instant(
    queue: AsyncQueue,
) -> None:
    titles = [f"t{i:02d}" for i in range(20)]
    await queue.submit_many([{"title": t, "task_type": "docs", "priority": 6} for t in titles])
    await queue.admit()
    assert await claim_one_by_one(queue) == titles


async def test_one_claim_of_many_returns_them_in_claim_order(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    for title, priority in [("a5", 5), ("b2", 2), ("c5", 5), ("d2", 2), ("e9", 9)]:
        await submit(queue, title, priority)
        clock.advance(1)
    await queue.admit()
    claimed = await queue.claim(10, "worker-1")
    assert [t.title for t in claimed] == ["b2", "d2", "a5", "c5", "e9"]
    assert all(t.state is TaskState.EXECUTING for t in claimed)


async def test_admit_takes_lower_priority_numbers_first_and_fifo_within_one(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    for title, priority in [("a6", 6), ("b3", 3), ("c6", 6), ("d3", 3), ("e8", 8)]:
        await submit(queue, title, priority)
        clock.advance(1)
    admitted = []
    while batch := await queue.admit(limit=1):
        admitted.append(batch[0].title)
    assert admitted == ["b3", "d3", "a6", "c6", "e8"]


async def test_admit_of_many_returns_them_in_admission_order_and_stops_at_limit(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    for title, priority in [("a6", 6), ("b3", 3), ("c6", 6), ("d3", 3), ("e8", 8)]:
        await submit(queue, title, priority)
        clock.advance(1)
    first = await queue.admit(limit=3)
    assert [t.title for t in first] == ["b3", "d3", "a6"]
    assert all(t.state is TaskState.QUEUED for t in first)
    assert (await queue.stats()).by_state[TaskState.PENDING] == 2


async def test_claim_takes_only_queued_tasks(queue: AsyncQueue) -> None:
    await submit(queue, "pending", 1)
    assert await queue.claim(5, "worker-1") == []
    await queue.admit()
    [claimed] = await queue.claim(5, "worker-1")
    assert claimed.title == "pending"
    assert await queue.claim(5, "worker-1") == []


async def test_claim_filters_by_task_type(queue: AsyncQueue) -> None:
    await queue.submit(title="doc", task_type="docs", priority=1)
    await queue.submit(title="fix", task_type="bugfix", priority=5)
    await queue.admit()
    assert [t.title for t in await queue.claim(5, "w", task_types=["bugfix"])] == ["fix"]
    assert await queue.claim(5, "w", task_types=["review"]) == []
    assert [t.title for t in await queue.claim(5, "w", task_types=["docs", "review"])] == ["doc"]


async def test_p5_task_that_waited_30_minutes_ranks_like_a_fresh_p2_and_goes_first(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "old-p5", 5)
    clock.advance(30 * MINUTE)
    await submit(queue, "fresh-p2", 2)
    await submit(queue, "fresh-p3", 3)
    await submit(queue, "fresh-p1", 1)
    await queue.admit()
    # Aged to 2: ahead of the P2 submitted later (FIFO in rank 2), behind a fresh P1.
    assert await claim_one_by_one(queue) == ["fresh-p1", "old-p5", "fresh-p2", "fresh-p3"]


async def test_p5_task_one_second_short_of_30_minutes_still_ranks_behind_a_fresh_p2(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "old-p5", 5)
    clock.advance(30 * MINUTE - 1)
    await submit(queue, "fresh-p2", 2)
    await submit(queue, "fresh-p3", 3)
    await queue.admit()
    # Aged to 3 only: behind the fresh P2, ahead of the fresh P3 (it became eligible first).
    assert await claim_one_by_one(queue) == ["fresh-p2", "old-p5", "fresh-p3"]


async def test_aging_is_computed_at_claim_time_not_at_admission(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "old-p9", 9)
    clock.advance(10 * MINUTE)
    await submit(queue, "p1", 1)
    admitted = await queue.admit()
    assert [t.title for t in admitted] == ["p1", "old-p9"]
    # 90 minutes on, the P9 has aged down to 1 (never lower) and became eligible first.
    clock.advance(80 * MINUTE)
    assert await claim_one_by_one(queue) == ["old-p9", "p1"]


async def test_admission_order_also_ages(queue: AsyncQueue, clock: ManualClock) -> None:
    await submit(queue, "old-p5", 5)
    clock.advance(30 * MINUTE)
    await submit(queue, "fresh-p2", 2)
    [first] = await queue.admit(limit=1)
    assert first.title == "old-p5"


async def test_p9_task_waiting_a_week_is_still_claimed_after_a_fresh_p0(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "old-p9", 9)
    await submit(queue, "old-p1", 1)
    clock.advance(timedelta(days=7).total_seconds())
    await submit(queue, "fresh-p0", 0)
    await queue.admit()
    assert await claim_one_by_one(queue) == ["fresh-p0", "old-p9", "old-p1"]


async def test_p9_task_waiting_a_week_is_still_admitted_after_a_fresh_p0(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "old-p9", 9)
    clock.advance(timedelta(days=7).total_seconds())
    await submit(queue, "fresh-p0", 0)
    assert [t.title for t in await queue.admit(limit=1)] == ["fresh-p0"]


async def test_p0_tasks_are_fifo_among_themselves(queue: AsyncQueue, clock: ManualClock) -> None:
    for i in range(4):
        await submit(queue, f"p0-{i}", 0)
        clock.advance(timedelta(hours=3).total_seconds())
    await queue.admit()
    assert await claim_one_by_one(queue) == [f"p0-{i}" for i in range(4)]


async def test_run_after_in_the_future_keeps_a_task_out_of_admission_until_it_passes(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    later = await submit(queue, "later", 1, run_after=clock.now() + timedelta(minutes=5))
    now = await submit(queue, "now", 9)
    assert [t.id for t in await queue.admit()] == [now.id]
    clock.advance(5 * MINUTE - 1)
    assert await queue.admit() == []
    assert (await queue.get(later.id)).state is TaskState.PENDING
    clock.advance(1)
    [admitted] = await queue.admit()
    assert admitted.id == later.id and admitted.state is TaskState.QUEUED


async def test_task_waiting_for_run_after_does_not_hold_back_admission_of_others(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    later = clock.now() + timedelta(minutes=5)
    for i in range(3):
        await submit(queue, f"later-p1-{i}", 1, run_after=later)
    due = await submit(queue, "due-p9", 9)
    # The not-yet-due tasks rank first but must not use up the admission limit.
    assert [t.id for t in await queue.admit(limit=1)] == [due.id]


async def test_run_after_task_ages_from_run_after_not_from_submission(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await submit(queue, "deferred-p5", 5, run_after=clock.now() + timedelta(hours=1))
    clock.advance(timedelta(hours=1).total_seconds())
    await submit(queue, "fresh-p4", 4)
    await queue.admit()
    # An hour since submission, but no time since it became eligible: still a P5.
    assert await claim_one_by_one(queue) == ["fresh-p4", "deferred-p5"]


async def test_admit_and_claim_order_match_order_key_for_random_priorities_and_waits(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    rng = random.Random(20260301)
    aging = queue.settings.queue.aging_interval_secs
    pending: dict[UUID, Task] = {}
    queued: dict[UUID, Task] = {}

    def best(tasks: dict[UUID, Task], n: int) -> list[UUID]:
        now = clock.now()
        return sorted(
            tasks,
            key=lambda i: order_key(
                tasks[i].priority, tasks[i].eligible_at, tasks[i].seq, now, aging
            ),
        )[:n]

    async def admit_and_claim() -> None:
        due = {
            i: t for i, t in pending.items() if t.run_after is None or t.run_after <= clock.now()
        }
        limit = rng.choice([1, 2, 5, 100])
        admitted = await queue.admit(limit=limit)
        assert [t.id for t in admitted] == best(due, limit), f"admit at {clock.now()}"
        for task in admitted:
            queued[task.id] = pending.pop(task.id)
        n = rng.choice([1, 1, 2, 3, 7])
        claimed = await queue.claim(n, "worker-1")
        assert [t.id for t in claimed] == best(queued, n), f"claim at {clock.now()}"
        for task in claimed:
            del queued[task.id]

    for i in range(60):
        # Whole minutes make waits that land exactly on aging boundaries; zero steps make tasks
        # that share eligible_at and are ordered by seq alone.
        clock.advance(rng.choice([0, 0, 30, 60, 120, 300, 600]))
        run_after = None
        if rng.random() < 0.15:
            run_after = clock.now() + timedelta(seconds=rng.choice([60, 600, 1800]))
        task = await submit(queue, f"t{i:02d}", rng.randrange(10), run_after=run_after)
        assert task.seq > 0
        pending[task.id] = task
        if rng.random() < 0.3:
            await admit_and_claim()
    while pending or queued:
        clock.advance(rng.choice([0, 60, 299, 600]))
        await admit_and_claim()
    assert await queue.claim(1, "worker-1") == []
