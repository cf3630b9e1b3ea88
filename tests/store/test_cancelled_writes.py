"""Writes cancelled at any moment (as a stopping worker cancels its loops) leave the store
usable: no connection is left inside a transaction, and nothing is half-written."""

from __future__ import annotations

import asyncio
import random

from agentqueue import AsyncQueue, TaskState


async def test_cancelling_writes_midway_never_wedges_the_store(queue: AsyncQueue) -> None:
    rnd = random.Random(7)
    await queue.submit_many({"title": f"t{i}", "task_type": "docs"} for i in range(200))
    for _ in range(60):
        job = asyncio.create_task(
            rnd.choice([queue.admit_ids, lambda: queue.claim(5, "w"), queue.tick])()
        )
        await asyncio.sleep(rnd.random() * 0.003)
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
    # The store still takes writes, and every chain is whole.
    made = await queue.submit(title="after", task_type="docs")
    assert made.created
    await queue.admit()
    claimed = await queue.claim(500, "w2")
    for task in claimed:
        assert task.lock_token is not None
        await queue.complete(task.id, task.lock_token)
    stats = (await queue.stats()).by_state
    assert stats[TaskState.PENDING] == 0 and stats[TaskState.QUEUED] == 0
    assert (await queue.verify()).ok
