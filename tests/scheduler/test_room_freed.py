"""A completion's notice runs an admission pass only if the last pass left work it could let
through (Scheduler.room_freed): pending tasks held back by a cap, or tasks held for their
dependencies. One heard while a pass runs is weighed when that pass ends, by what it left."""

from __future__ import annotations

import shutil
from typing import Any

from agentqueue import AsyncQueue, TaskState
from agentqueue.config import Settings
from agentqueue.scheduler.loop import Scheduler

CAPPED = Settings(
    agents={
        "one": {
            "command": [shutil.which("true") or "/bin/true"],
            "task_types": ["t_one"],
            "isolation": "none",
            "max_concurrent": 1,
        }
    }
)


async def test_a_completion_wakes_the_scheduler_only_when_work_was_left_waiting(
    db_url: str,
) -> None:
    queue = AsyncQueue(db_url, settings=CAPPED)
    await queue.open()
    try:
        scheduler = Scheduler(await queue.runtime(), "s1")
        scheduler.room_freed()
        assert scheduler.wake.is_set()  # nothing known yet: a pass runs
        scheduler.wake.clear()
        await scheduler._pass(admit_first=True)  # nothing pending: nothing left waiting
        scheduler.room_freed()
        assert not scheduler.wake.is_set()

        await queue.submit_many([{"title": f"t{i}", "task_type": "t_one"} for i in range(2)])
        await scheduler._pass(admit_first=True)  # the cap lets one through; one waits
        counts = await queue.store.count_by_state()
        assert counts[TaskState.QUEUED] == 1 and counts[TaskState.PENDING] == 1
        scheduler.room_freed()
        assert scheduler.wake.is_set()
    finally:
        await queue.close()


async def test_a_completion_heard_during_a_pass_is_weighed_by_what_that_pass_left(
    db_url: str,
) -> None:
    """The last pass left nothing waiting; a completion comes while the next pass runs, which
    leaves a task behind the cap: the scheduler passes again (it would otherwise wait for the
    tick, though the room may be free already)."""
    queue = AsyncQueue(db_url, settings=CAPPED)
    await queue.open()
    try:
        rt = await queue.runtime()
        scheduler = Scheduler(rt, "s1")
        await scheduler._pass(admit_first=True)  # nothing pending
        await queue.submit_many([{"title": f"t{i}", "task_type": "t_one"} for i in range(2)])
        read = rt.work_hints

        async def hints_with_a_completion(*args: Any) -> Any:
            scheduler.room_freed()  # its notice, heard while the pass reads
            return await read(*args)

        rt.work_hints = hints_with_a_completion  # type: ignore[method-assign]
        scheduler.wake.clear()
        await scheduler._pass(admit_first=True)
        assert (await queue.store.count_by_state())[TaskState.PENDING] == 1
        assert scheduler.wake.is_set()
    finally:
        await queue.close()
