"""Contract of dedup (R2) at the store: one live task per (tenant, source, source_id), any number
once earlier ones ended; one task per (tenant, idempotency_key) whatever its state."""

from __future__ import annotations

from typing import Any

import pytest

from agentqueue.domain.models import Task
from agentqueue.domain.states import Action, Request, TaskState, bulk_event
from agentqueue.service.runtime import Runtime
from agentqueue.service.submit import submit_many
from agentqueue.store import DedupKey, Store

from .conftest import WORKER, build, change, claimed, insert

SOURCE = {"source": "issue", "source_id": "octo/repo#12"}
KEY = DedupKey("default", None, "issue", "octo/repo#12")


async def _apply(rt: Runtime, task: Task, request: Request) -> Task:
    async with rt.store.transaction() as tx:
        [locked] = await tx.lock([task.id])
        assert await tx.apply([change(locked, request)]) == {task.id}
    [now] = await rt.store.get_tasks([task.id])
    return now


async def in_state(rt: Runtime, state: TaskState, **fields: Any) -> Task:
    """A new task taken to ``state`` by the transitions that lead there."""
    now = rt.clock.now()
    if state is TaskState.PENDING:
        return await insert(rt, **fields)
    if state is TaskState.QUEUED:
        return await insert(rt, admitted=True, **fields)
    if state is TaskState.CANCELLED:
        return await _apply(rt, await insert(rt, **fields), Request(Action.CANCEL, now, "a"))
    if state in (TaskState.DEAD_LETTER, TaskState.ARCHIVED):
        fields["max_retries"] = 0
    task = await claimed(rt, **fields)
    token = task.lock_token
    if state is TaskState.EXECUTING:
        return task
    if state is TaskState.COMPLETED:
        assert token is not None
        event = bulk_event(Action.COMPLETE, now, WORKER)
        assert await rt.store.complete([(task.id, token, None)], now, event)
        [done] = await rt.store.get_tasks([task.id])
        return done
    retryable = state is not TaskState.FAILED
    fail = Request(Action.FAIL, now, WORKER, lock_token=token, error="boom", retryable=retryable)
    task = await _apply(rt, task, fail)
    if state is TaskState.ARCHIVED:
        task = await _apply(rt, task, Request(Action.ARCHIVE, now, "alice"))
    assert task.state is state
    return task


TERMINAL = [TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED, TaskState.ARCHIVED]
LIVE = [TaskState.PENDING, TaskState.QUEUED, TaskState.EXECUTING, TaskState.DEAD_LETTER]


@pytest.mark.parametrize("state", TERMINAL, ids=[s.value for s in TERMINAL])
async def test_a_source_whose_task_ended_gets_a_new_task(
    store: Store, rt: Runtime, state: TaskState
) -> None:
    """Once the task of a source is completed, failed, cancelled or archived, insert_tasks
    stores a new task for that source and find_existing no longer returns the old one; a
    submit then creates a new task, and the next submit returns that new one."""
    old = await in_state(rt, state, **SOURCE)
    assert await store.find_existing([KEY]) == []
    record = build(rt, **SOURCE)
    assert set(await store.insert_tasks([record])) == {record.task.id}
    assert [t.id for t in await store.find_existing([KEY])] == [record.task.id]
    # And through submit, which settles dedup with these two operations:
    await _apply(rt, record.task, Request(Action.CANCEL, rt.clock.now(), "a"))
    [first] = await submit_many(rt, [{"title": "again", "task_type": "bugfix", **SOURCE}])
    [second] = await submit_many(rt, [{"title": "again", "task_type": "bugfix", **SOURCE}])
    assert first.created and first.task.id not in (old.id, record.task.id)
    assert not second.created and second.task.id == first.task.id


@pytest.mark.parametrize("state", LIVE, ids=[s.value for s in LIVE])
async def test_a_source_with_a_live_task_gets_no_second_task(
    store: Store, rt: Runtime, state: TaskState
) -> None:
    """While the task of a source is live (dead_letter included), insert_tasks skips another
    task for it and find_existing returns the live one."""
    live = await in_state(rt, state, **SOURCE)
    record = build(rt, **SOURCE)
    assert await store.insert_tasks([record]) == {}
    assert await store.get_tasks([record.task.id]) == []
    assert [t.id for t in await store.find_existing([KEY])] == [live.id]


@pytest.mark.parametrize("state", TERMINAL + LIVE, ids=[s.value for s in TERMINAL + LIVE])
async def test_an_idempotency_key_always_names_the_same_task(
    store: Store, rt: Runtime, state: TaskState
) -> None:
    """Whatever state its task is in, an idempotency key admits no second task, and
    find_existing returns the task that holds it."""
    held = await in_state(rt, state, idempotency_key="once")
    record = build(rt, idempotency_key="once")
    assert await store.insert_tasks([record]) == {}
    found = await store.find_existing([DedupKey("default", "once", "api", None)])
    assert [(t.id, t.state) for t in found] == [(held.id, state)]


async def test_dedup_inside_one_batch_keeps_the_first(store: Store, rt: Runtime) -> None:
    """Two tasks of one batch with the same live source or the same key: the first is kept."""
    a, b = build(rt, **SOURCE), build(rt, **SOURCE)
    c, d = build(rt, idempotency_key="k"), build(rt, idempotency_key="k")
    assert set(await store.insert_tasks([a, b, c, d])) == {a.task.id, c.task.id}
