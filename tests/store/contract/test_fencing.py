"""Contract of fencing (R5, ARCHITECTURE rule 2): once a lease was taken back and the task
claimed again, every write of the old holder changes nothing (row and events as they were), and
the same write of the current holder goes through.

Where each fence lives: heartbeat, complete and save_checkpoint check the lock_token in their own
statement; fail, release and waiting_tool are decided by domain.states (which checks the token)
and written by Tx.apply, whose guard (expected state and audit position) refuses a change decided
on the old holder's image; tool-call writes (set_tool_calls, tool results through Tx.apply) are
guarded by the task's audit position.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentqueue import ManualClock
from agentqueue.domain.models import Task
from agentqueue.domain.states import (
    TOOL_RUNNING,
    Action,
    Refusal,
    RefusalKind,
    Request,
    TaskState,
    bulk_event,
    decide,
)
from agentqueue.service.runtime import Runtime
from agentqueue.store import Lease, Store

from .conftest import (
    GRACE,
    LEASE_TTL,
    WORKER,
    change,
    claim,
    claimed,
    lapse,
    reclaimed,
    snapshot,
    waiting_on_tool,
)


async def stale_and_current(rt: Runtime, clock: ManualClock) -> tuple[Task, Task]:
    """The task as its first holder claimed it, and as its second holder claimed it after the
    first lease lapsed and was taken back."""
    old = await claimed(rt)
    new = await reclaimed(rt, clock, old)
    return old, new


async def test_stale_heartbeat_extends_nothing(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """heartbeat with the old token is refused and leaves the new lease as it was; the new
    token's heartbeat extends it."""
    old, new = await stale_and_current(rt, clock)
    assert old.lock_token and new.lock_token
    before = await snapshot(store, old.id)
    clock.advance(5)
    now = clock.now()
    assert await store.heartbeat([Lease(old.id, old.lock_token)], now, LEASE_TTL, GRACE) == set()
    assert await snapshot(store, old.id) == before
    assert await store.heartbeat([Lease(new.id, new.lock_token)], now, LEASE_TTL, GRACE) == {new.id}
    [t] = await store.get_tasks([new.id])
    assert t.heartbeat_at == now and t.lease_expires_at == now + timedelta(seconds=LEASE_TTL)


async def test_stale_complete_writes_nothing(store: Store, rt: Runtime, clock: ManualClock) -> None:
    """complete with the old token is refused: the task stays executing for the new holder
    with no event added; the new token's completion is written."""
    old, new = await stale_and_current(rt, clock)
    assert old.lock_token and new.lock_token
    before = await snapshot(store, old.id)
    now = clock.now()
    event = bulk_event(Action.COMPLETE, now, WORKER)
    assert await store.complete([(old.id, old.lock_token, "stale")], now, event) == {}
    assert await snapshot(store, old.id) == before
    heads = await store.complete([(new.id, new.lock_token, "fresh")], now, event)
    assert set(heads) == {new.id}
    [t] = await store.get_tasks([new.id])
    assert t.state is TaskState.COMPLETED and t.result == "fresh"


async def test_stale_save_checkpoint_writes_nothing(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """save_checkpoint with the old token returns False and keeps the new holder's checkpoint;
    with the new token it is kept."""
    old, new = await stale_and_current(rt, clock)
    assert old.lock_token and new.lock_token
    assert await store.save_checkpoint(new.id, new.lock_token, {"step": 1})
    before = await snapshot(store, old.id)
    assert not await store.save_checkpoint(old.id, old.lock_token, {"step": "stale"})
    assert await snapshot(store, old.id) == before
    assert await store.save_checkpoint(new.id, new.lock_token, {"step": 2})
    [t] = await store.get_tasks([new.id])
    assert t.checkpoint == {"step": 2}


def executor_write(kind: str, task: Task, now: object) -> Request:
    """The executor's request of ``kind`` (fail, release, waiting_tool) under ``task``'s token."""
    token = task.lock_token
    if kind == "fail":
        return Request(Action.FAIL, now, WORKER, lock_token=token, error="boom")  # type: ignore[arg-type]
    if kind == "release":
        return Request(Action.RELEASE, now, WORKER, lock_token=token, reason="shutdown")  # type: ignore[arg-type]
    call = {"id": "c1", "name": "search", "args": {"q": "x"}}
    return Request(Action.WAIT_TOOL, now, WORKER, lock_token=token, tool_call=call)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["fail", "release", "waiting_tool"])
async def test_stale_fail_release_or_tool_wait_writes_nothing(
    store: Store, rt: Runtime, clock: ManualClock, kind: str
) -> None:
    """A change the old holder decided on its claimed image is refused by Tx.apply's guard (the
    task is executing again, at a later audit position); decided on the current row under the
    old token, decide() refuses it as fenced; the new holder's change is written."""
    old, new = await stale_and_current(rt, clock)
    assert old.event_seq < new.event_seq and old.state is new.state is TaskState.EXECUTING
    before = await snapshot(store, old.id)
    now = clock.now()
    async with store.transaction() as tx:
        assert await tx.apply([change(old, executor_write(kind, old, now))]) == set()
        [current] = await tx.lock([old.id])
    assert await snapshot(store, old.id) == before
    refused = decide(current, executor_write(kind, old, now))
    assert isinstance(refused, Refusal) and refused.kind is RefusalKind.FENCED
    async with store.transaction() as tx:
        assert await tx.apply([change(current, executor_write(kind, new, now))]) == {new.id}
    t, events = await snapshot(store, new.id)
    assert t.state is not TaskState.EXECUTING and t.lock_token is None
    assert len(events) == len(before[1]) + 1


async def test_write_decided_before_the_lease_was_taken_back_writes_nothing(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """The old holder's completion-by-change after its lease was taken back (task retrying)
    is refused by the expected-state guard."""
    old = await claimed(rt)
    await lapse(rt, clock)
    before = await snapshot(store, old.id)
    assert before[0].state is TaskState.RETRYING
    req = Request(Action.COMPLETE, clock.now(), WORKER, lock_token=old.lock_token, result=1)
    async with store.transaction() as tx:
        assert await tx.apply([change(old, req)]) == set()
    assert await snapshot(store, old.id) == before


async def test_stale_set_tool_calls_writes_nothing(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """A runner's lease on a call, written from an image read before the task moved on (its
    result arrived, it ran again and waits on a new call), is refused; from the current image
    it is written."""
    stale = await waiting_on_tool(rt)
    now = clock.now()
    result = Request(Action.TOOL_RESULT, now, "runner", tool_call_id="c1", result={"hits": 1})
    async with store.transaction() as tx:
        assert await tx.apply([change(stale, result)]) == {stale.id}
    [queued] = await store.get_tasks([stale.id])
    [again] = await claim(store, 1, now, task_types=[stale.task_type])
    call = {"id": "c2", "name": "search", "args": {}}
    wait = Request(Action.WAIT_TOOL, now, WORKER, lock_token=again.lock_token, tool_call=call)
    async with store.transaction() as tx:
        assert await tx.apply([change(again, wait)]) == {stale.id}
    before = await snapshot(store, stale.id)
    assert before[0].state is TaskState.WAITING_TOOL and queued.event_seq < before[0].event_seq
    taken = [{**c, "state": TOOL_RUNNING, "runner": "r1"} for c in stale.tool_calls]
    async with store.transaction() as tx:
        assert not await tx.set_tool_calls(stale, taken)
    assert await snapshot(store, stale.id) == before
    current = before[0]
    fresh = [{**c, "state": TOOL_RUNNING, "runner": "r2"} for c in current.tool_calls]
    async with store.transaction() as tx:
        assert await tx.set_tool_calls(current, fresh)
    t, events = await snapshot(store, stale.id)
    assert [c["runner"] for c in t.tool_calls] == ["r2", "r2"] and events == before[1]


async def test_stale_tool_result_writes_nothing(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    """A tool result decided on an image read before another result was taken is refused by
    Tx.apply's guard; decided on the current row, the call is no longer awaited."""
    task = await waiting_on_tool(rt)
    now = clock.now()
    first = Request(Action.TOOL_RESULT, now, "runner-1", tool_call_id="c1", result=1)
    second = Request(Action.TOOL_RESULT, now, "runner-2", tool_call_id="c1", result=2)
    async with store.transaction() as tx:
        assert await tx.apply([change(task, first)]) == {task.id}
    before = await snapshot(store, task.id)
    async with store.transaction() as tx:
        assert await tx.apply([change(task, second)]) == set()
    assert await snapshot(store, task.id) == before
    assert before[0].tool_calls[0]["result"] == 1
    assert isinstance(decide(before[0], second), Refusal)
