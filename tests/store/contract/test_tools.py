"""Contract of waiting on tools (R9): the locking reads of timed-out and takeable calls, and
the runner's lease on a call written without a change of state."""

from __future__ import annotations

from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.domain.states import TOOL_RUNNING, Action, Request, TaskState
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store

from .conftest import change, snapshot, waiting_on_tool


async def test_lock_tool_timeouts_returns_calls_past_their_deadline(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.lock_tool_timeouts returns waiting_tool tasks whose deadline has passed, earliest
    deadline first, up to the limit; none before."""
    now = clock.now()
    late = await waiting_on_tool(rt, timeout_secs=120, worker="w1")
    early = await waiting_on_tool(rt, timeout_secs=60, worker="w2")
    async with store.transaction() as tx:
        assert await tx.lock_tool_timeouts(now + timedelta(seconds=59), 10) == []
        at_60 = await tx.lock_tool_timeouts(now + timedelta(seconds=60), 10)
        assert [t.id for t in at_60] == [early.id]
        both = await tx.lock_tool_timeouts(now + timedelta(seconds=120), 10)
        assert [t.id for t in both] == [early.id, late.id]
        assert len(await tx.lock_tool_timeouts(now + timedelta(seconds=120), 1)) == 1


async def test_lock_tool_work_finds_waiting_calls_and_lapsed_runner_leases(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.lock_tool_work returns tasks with a call of one of the named tools that is waiting,
    or running under a runner lease that has passed; a live runner lease or another tool's call
    is not returned."""
    search = await waiting_on_tool(rt, tool="search", worker="w1")
    await waiting_on_tool(rt, tool="browse", worker="w2")
    taken = await waiting_on_tool(rt, tool="search", worker="w3")
    now = clock.now()
    until = (now + timedelta(seconds=30)).timestamp()
    calls = [{**c, "state": TOOL_RUNNING, "runner": "r", "lease_until_ts": until}
             for c in taken.tool_calls]  # fmt: skip
    async with store.transaction() as tx:
        assert await tx.set_tool_calls(taken, calls)
    async with store.transaction() as tx:
        assert [t.id for t in await tx.lock_tool_work(["search"], now, 10)] == [search.id]
        assert await tx.lock_tool_work(["other"], now, 10) == []
        assert await tx.lock_tool_work([], now, 10) == []
        later = now + timedelta(seconds=30)
        got = await tx.lock_tool_work(["search"], later, 10)
        assert sorted(t.id for t in got) == sorted([search.id, taken.id])
        assert len(await tx.lock_tool_work(["search", "browse"], later, 2)) == 2


async def test_set_tool_calls_replaces_calls_without_an_event(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """Tx.set_tool_calls replaces the calls of a task still waiting at its audit position and
    writes no event; on a task no longer waiting_tool it returns False and writes nothing."""
    task = await waiting_on_tool(rt)
    calls = [{**c, "state": TOOL_RUNNING, "runner": "r1"} for c in task.tool_calls]
    async with store.transaction() as tx:
        assert await tx.set_tool_calls(task, calls)
    t, events = await snapshot(store, task.id)
    assert list(t.tool_calls) == calls and t.event_seq == task.event_seq
    assert len(events) == task.event_seq
    cancel = Request(Action.CANCEL, clock.now(), "alice")
    async with store.transaction() as tx:
        assert await tx.apply([change(t, cancel)])
    [cancelled] = await store.get_tasks([task.id])
    before = await snapshot(store, task.id)
    assert cancelled.state is TaskState.CANCELLED
    async with store.transaction() as tx:
        assert not await tx.set_tool_calls(cancelled, [])
    assert await snapshot(store, task.id) == before
