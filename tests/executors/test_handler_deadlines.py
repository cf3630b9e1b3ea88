"""The deadlines of async handlers: kept on one loop timer per tick (executors.inprocess.Deadlines),
they must still stop every attempt past its deadline, and only those, as a timer of its own did."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_harness import make_task

from agentqueue.executors.base import AttemptControl, AttemptEnd
from agentqueue.executors.inprocess import DEADLINE_TICK_SECS, HandlerExecutor, TaskContext


async def _sleep(task: Any, ctx: TaskContext) -> str:
    await asyncio.sleep(float(task.payload["secs"]))
    return "woke"


async def _swallow(task: Any, ctx: TaskContext) -> str:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        return "kept going"
    return "woke"


def _executor() -> HandlerExecutor:
    return HandlerExecutor({"sleep": _sleep, "swallow": _swallow}, max_concurrent=1000)


def _control(in_secs: float) -> AttemptControl:
    return AttemptControl(deadline=time.monotonic() + in_secs, timeout_secs=in_secs)


async def test_many_attempts_past_their_deadline_time_out_and_the_others_complete() -> None:
    executor = _executor()
    slow = [make_task(task_type="sleep", payload={"secs": 30}) for _ in range(150)]
    quick = [make_task(task_type="sleep", payload={"secs": 0.01}) for _ in range(150)]
    started = time.monotonic()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(executor.run(t, _control(0.3)) for t in slow),
            *(executor.run(t, _control(60)) for t in quick),
        ),
        timeout=20,
    )
    ends = [r.end for r in results]
    assert ends[:150] == [AttemptEnd.TIMED_OUT] * 150
    assert all("timed out" in (r.error or "") for r in results[:150])
    assert ends[150:] == [AttemptEnd.COMPLETED] * 150
    assert [r.result for r in results[150:]] == ["woke"] * 150
    # Not before the deadline, and not long after it (a tick late at most, plus the loop's own
    # delays on a busy machine: a generous bound).
    assert time.monotonic() - started >= 0.3
    assert executor.deadlines.watched == 0, "an ended attempt is still watched"
    assert executor.deadlines.timers == 0, "a tick's timer outlived its attempts"


async def test_a_stop_that_meets_the_deadline_is_a_cancel_not_a_timeout() -> None:
    executor = _executor()
    control = _control(-1.0)  # already past: the tick's timer fires on the loop's next turn
    job = asyncio.ensure_future(
        executor.run(make_task(task_type="sleep", payload={"secs": 30}), control)
    )
    await asyncio.sleep(0)  # the handler is running, its deadline watched
    control.stop("revoked")  # both cancels are requested before the attempt resumes
    result = await asyncio.wait_for(job, timeout=10)
    assert result.end is AttemptEnd.CANCELLED and result.error == "revoked"
    assert executor.deadlines.watched == 0


async def test_a_handler_swallowing_its_deadline_completes_and_its_task_is_left_uncancelled() -> (
    None
):
    executor = _executor()

    async def attempt() -> tuple[Any, int]:
        result = await executor.run(make_task(task_type="swallow", payload={}), _control(0.1))
        current = asyncio.current_task()
        assert current is not None
        return result, current.cancelling()

    result, cancelling = await asyncio.wait_for(asyncio.ensure_future(attempt()), timeout=10)
    assert result.end is AttemptEnd.COMPLETED and result.result == "kept going"
    # The deadline's cancel was withdrawn: the task running the attempt carries on uncancelled.
    assert cancelling == 0


async def test_a_cancel_from_outside_the_attempt_is_passed_on() -> None:
    executor = _executor()
    job = asyncio.ensure_future(
        executor.run(make_task(task_type="sleep", payload={"secs": 30}), _control(60))
    )
    await asyncio.sleep(0.05)
    job.cancel()  # the worker itself going down: not the attempt's stop, not its deadline
    done, _ = await asyncio.wait({job}, timeout=10)
    assert job in done and job.cancelled()
    assert executor.deadlines.watched == 0


async def test_attempts_share_a_timer_per_tick() -> None:
    executor = _executor()
    loop = asyncio.get_running_loop()
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    # The middle of one tick ten seconds on: a boundary's float could fall on either side.
    deadline = (int(time.monotonic() / DEADLINE_TICK_SECS) + 200.5) * DEADLINE_TICK_SECS
    jobs = [
        asyncio.ensure_future(
            executor.run(
                make_task(task_type="sleep", payload={"secs": 30}),
                AttemptControl(deadline=deadline + i * 1e-6, timeout_secs=10),
            )
        )
        for i in range(100)
    ]
    await asyncio.sleep(0.05)
    # A hundred attempts in one tick: one timer for their deadlines (and one for each sleep).
    assert len(loop._scheduled) - before == 1 + 100  # type: ignore[attr-defined]
    for job in jobs:
        job.cancel()
    await asyncio.wait(jobs, timeout=10)
    assert executor.deadlines.watched == 0 and executor.deadlines.timers == 0
