"""Admission at submit: a task nothing holds back is admitted as it is submitted, both steps
audited; anything with a future run_after or dependencies waits for the scheduler."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from agentqueue import AsyncQueue, ManualClock, TaskState
from agentqueue.config import Settings
from agentqueue.store.base import CHANNEL_PENDING, CHANNEL_QUEUED, CHANNELS


@pytest.fixture
def settings() -> Settings:
    return Settings()  # the default: admit at submit


async def test_a_task_that_may_run_now_is_queued_with_both_steps_audited(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    made = await queue.submit(title="now", task_type="docs", requested_by="alice")
    assert made.created and made.task.state is TaskState.QUEUED
    events = await queue.events(made.task.id)
    assert [(e.from_state, e.to_state, e.actor, e.at) for e in events] == [
        (None, TaskState.PENDING, "alice", clock.now()),
        (TaskState.PENDING, TaskState.QUEUED, "scheduler", clock.now()),
    ]
    assert made.task.event_seq == 2 and made.task.last_hash == events[-1].hash
    assert await queue.get(made.task.id) == made.task
    assert (await queue.verify()).ok
    [claimed] = await queue.claim(1, "w")
    assert claimed.id == made.task.id


async def test_future_run_after_and_dependencies_wait_for_the_scheduler(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    later = await queue.submit(
        title="later", task_type="docs", run_after=clock.now() + timedelta(minutes=5)
    )
    first = await queue.submit(title="first", task_type="docs")
    after = await queue.submit(title="after", task_type="docs", depends_on=[first.task.id])
    assert later.task.state is TaskState.PENDING
    # A dependent waits in blocked, held for its dependencies, until they complete.
    assert after.task.state is TaskState.BLOCKED and after.task.hold == "dependencies"
    assert [e.to_state for e in await queue.events(later.task.id)] == [TaskState.PENDING]
    assert await queue.admit() == []
    clock.advance(minutes=5)
    assert [t.id for t in await queue.admit()] == [later.task.id]


async def test_bulk_submit_admits_each_task_on_its_own_merits(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    results = await queue.submit_many(
        [
            {"title": "a", "task_type": "docs"},
            {"title": "b", "task_type": "docs", "run_after": clock.now() + timedelta(hours=1)},
            {"title": "c", "task_type": "docs", "source": "issue", "source_id": "o/r#1"},
            {"title": "c again", "task_type": "docs", "source": "issue", "source_id": "o/r#1"},
        ]
    )
    assert [r.task.state for r in results] == [
        TaskState.QUEUED,
        TaskState.PENDING,
        TaskState.QUEUED,
        TaskState.QUEUED,
    ]
    assert [r.created for r in results] == [True, True, True, False]
    assert results[3].task.id == results[2].task.id
    assert (await queue.verify()).ok


async def test_it_can_be_turned_off(db_url: str, clock: ManualClock) -> None:
    settings = Settings(queue={"admit_on_submit": False})
    async with AsyncQueue(db_url, clock=clock, settings=settings) as queue:
        made = await queue.submit(title="waits", task_type="docs")
        assert made.task.state is TaskState.PENDING


@pytest.mark.postgres
async def test_listeners_hear_queued_for_admitted_work_and_pending_for_the_rest(
    pg_url: str, clock: ManualClock
) -> None:
    async with AsyncQueue(pg_url, clock=clock) as queue:
        heard: list[str] = []
        async with queue.store.listen(CHANNELS) as notices:

            async def collect() -> None:
                async for notice in notices:
                    heard.append(notice.channel)

            listener = asyncio.create_task(collect())
            await asyncio.sleep(0.2)
            await queue.submit(title="now", task_type="docs")
            await queue.submit(
                title="later", task_type="docs", run_after=clock.now() + timedelta(hours=1)
            )
            for _ in range(100):
                if len(heard) >= 2:
                    break
                await asyncio.sleep(0.02)
            listener.cancel()
        assert heard == [CHANNEL_QUEUED, CHANNEL_PENDING]
