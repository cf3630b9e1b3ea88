"""One read of what work exists serves a process's scheduler, its claimer's poll and its cron
step: the hints a read found are reused within their age, and the cron step asks for the due
schedules only once the hints say a slot has come."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from scheduler_helpers import quick_config, spawn

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.domain.schedule import CatchUp, Schedule
from agentqueue.intake.cron import slot_key
from agentqueue.scheduler.steps import fire_due_slots

TASK = {"title": "Dependency audit", "task_type": "review"}


def due_now(clock: ManualClock, name: str = "audit") -> Schedule:
    """A schedule whose next slot is now (as the store keeps one; add_schedule would set the
    next slot after now)."""
    now = clock.now()
    return Schedule(
        tenant="default",
        name=name,
        cron="*/5 * * * *",
        tz="UTC",
        task=TASK,
        catch_up=CatchUp.SKIP,
        next_at=now,
        created_by="tester",
        created_at=now,
        updated_at=now,
    )


async def test_hints_are_reused_within_their_age_and_read_again_after(
    db_url: str, clock: ManualClock
) -> None:
    """Runtime.work_hints answers from the last read while it is younger than the age asked
    for (a task queued since is not seen), and reads again when asked for fresh hints."""
    async with AsyncQueue(db_url, clock=clock) as queue:
        rt = await queue.runtime()
        assert not (await rt.work_hints()).queued
        await queue.submit(title="t", task_type="noop")
        assert not (await rt.work_hints(max_age_secs=3600)).queued  # the read before
        assert (await rt.work_hints()).queued  # read again
        assert (await rt.work_hints(max_age_secs=3600)).queued


async def test_the_cron_step_reads_the_due_schedules_only_once_the_hints_show_a_slot(
    db_url: str, clock: ManualClock
) -> None:
    """With hints younger than a tick that show no schedule, the cron step asks nothing and
    fires nothing, though a slot is due (its schedule was added after the read); once the hints
    are read again they show the slot and the step fires it, once."""
    # A tick long enough that the hints read here stay young however slow the machine is.
    settings = Settings(scheduler={"tick_secs": 60})
    async with AsyncQueue(db_url, clock=clock, settings=settings) as queue:
        rt = await queue.runtime()
        assert (await rt.work_hints()).next_schedule_at is None
        assert await rt.store.insert_schedule(due_now(clock))
        assert await fire_due_slots(rt) == 0
        assert (await queue.list(source="cron")).items == []
        assert (await rt.work_hints()).next_schedule_at == clock.now()
        assert await fire_due_slots(rt) == 1
        [task] = (await queue.list(source="cron")).items
        assert task.title == TASK["title"]
        # Moved on: the hints of the next read wait for the next slot.
        later = (await rt.work_hints()).next_schedule_at
        assert later is not None and later > clock.now()
        assert await fire_due_slots(rt) == 0


async def test_a_slot_not_yet_come_by_the_hints_fires_when_it_has(
    db_url: str, clock: ManualClock
) -> None:
    """Hints that show a slot later than now keep the cron step from reading; when the clock
    reaches it the step reads and fires it, on the same hints."""
    settings = Settings(scheduler={"tick_secs": 60})
    async with AsyncQueue(db_url, clock=clock, settings=settings) as queue:
        rt = await queue.runtime()
        soon = replace(due_now(clock), next_at=clock.now() + timedelta(minutes=5))
        assert await rt.store.insert_schedule(soon)
        assert (await rt.work_hints()).next_schedule_at == soon.next_at
        assert await fire_due_slots(rt) == 0
        clock.advance(minutes=5)
        assert await fire_due_slots(rt) == 1


async def test_a_worker_process_fires_a_due_slot_from_its_hints(
    db_url: str, tmp_path: Path
) -> None:
    """A real worker (its scheduler leading, no task to run) fires a slot that is due: the cron
    step of its periodic loop sees it in the hints its passes read."""
    agent = f'[agents.payer]\ncommand = [{json.dumps(sys.executable)}, "-c", "pass"]\n'
    config = quick_config(tmp_path, agent + 'task_types = ["payment"]\n')
    worker = spawn(["--db", db_url, "--config", str(config), "worker"], tmp_path / "worker.log")
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            rt = await queue.runtime()
            schedule = due_now(ManualClock(queue.clock.now()))
            assert await rt.store.insert_schedule(schedule)
            for _ in range(300):  # up to 30 s
                if (await queue.list(source="cron")).items:
                    break
                await asyncio.sleep(0.1)
            [task] = (await queue.list(source="cron")).items
            assert task.idempotency_key == slot_key("audit", schedule.next_at)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
