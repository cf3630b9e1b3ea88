"""The set-wise hot transitions (domain.states.BULK_ACTIONS) write exactly what decide() would.

For ADMIT, CLAIM and COMPLETE each store applies the domain's rule to a whole batch in one
statement, computing the audit hash in the database. Here every row those statements touch is
compared, field by field and event by event (hash included), with the result of running the
same request through decide() and the Python audit chain.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.domain.audit import RowFields, row_mac
from agentqueue.domain.states import (
    BULK_ACTIONS,
    Action,
    Request,
    bulk_event,
    decide_or_raise,
)
from agentqueue.service.records import stamp
from agentqueue.store.base import ClaimAdmission, ClaimParams


def expected(task: Task, request: Request) -> tuple[Task, Any]:
    change = stamp(task, decide_or_raise(task, request))
    return change.task, change.event


def assert_same(actual: Task, wanted: Task) -> None:
    for name in wanted.__dict__:
        assert getattr(actual, name) == getattr(wanted, name), name


async def assert_last_event(queue: AsyncQueue, task: Task, wanted: Any) -> None:
    event = (await queue.events(task.id))[-1]
    for name in ("seq", "at", "from_state", "to_state", "action", "actor", "reason", "data"):
        assert getattr(event, name) == getattr(wanted, name), name
    assert event.hash == wanted.hash == task.last_hash
    assert (await queue.verify()).ok


def claim_request(queue: AsyncQueue, claimed: Task, now: datetime) -> Request:
    """The CLAIM by worker-7 that gave ``claimed`` (its lock token is fresh and random: the
    one the store chose)."""
    return Request(
        Action.CLAIM,
        now,
        actor="worker-7",
        worker="worker-7",
        new_lock_token=claimed.lock_token,
        lease_ttl_secs=queue.settings.queue.lease_ttl_secs,
        deadline_grace_secs=queue.settings.queue.deadline_grace_secs,
    )


async def make(queue: AsyncQueue, clock: ManualClock, n: int = 5) -> list[Task]:
    tasks = []
    for i in range(n):
        spec: dict[str, Any] = {"title": f"t{i}", "task_type": "docs", "priority": i % 3 * 4}
        if i % 3 == 0:
            spec.update(priority=0, idempotency_key=f"k{i}", tenant="pay")
        tasks.append((await queue.submit(**spec)).task)
        clock.advance(1)
    return tasks


def test_the_set_wise_actions_are_the_hot_three() -> None:
    assert set(BULK_ACTIONS) == {Action.ADMIT, Action.CLAIM, Action.COMPLETE}


async def test_admit_writes_what_decide_would(queue: AsyncQueue, clock: ManualClock) -> None:
    tasks = await make(queue, clock)
    now = clock.advance(5)
    wants = {t.id: expected(t, Request(Action.ADMIT, now, actor="scheduler")) for t in tasks}
    admitted = await queue.admit()
    assert {t.id for t in admitted} == set(wants)
    for task in admitted:
        image, event = wants[task.id]
        assert task.state is TaskState.QUEUED
        assert_same(task, image)
        await assert_last_event(queue, task, event)


async def test_claim_writes_what_decide_would(queue: AsyncQueue, clock: ManualClock) -> None:
    tasks = await make(queue, clock)
    await queue.admit()
    before = {t.id: t for t in await queue.store.get_tasks([t.id for t in tasks])}
    now = clock.advance(3)
    claimed = await queue.claim(10, "worker-7")
    assert {t.id for t in claimed} == set(before)
    for task in claimed:
        image, event = expected(before[task.id], claim_request(queue, task, now))
        assert_same(task, image)
        assert_same(await queue.get(task.id), image)
        await assert_last_event(queue, task, event)


async def test_complete_writes_what_decide_would(queue: AsyncQueue, clock: ManualClock) -> None:
    await make(queue, clock)
    await queue.admit()
    claimed = await queue.claim(10, "worker-7")
    now = clock.advance(2)
    for i, task in enumerate(claimed):
        result = {"n": i, "text": "naïve ✓", "nested": [1, {"a": None}]}
        request = Request(
            Action.COMPLETE, now, actor="api", lock_token=task.lock_token, result=result
        )
        image, event = expected(task, request)
        done = await queue.complete(task.id, task.lock_token, result)
        assert_same(done, image)
        assert_same(await queue.get(task.id), image)
        await assert_last_event(queue, done, event)


async def test_complete_with_a_stale_token_writes_nothing(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    await make(queue, clock, 1)
    await queue.admit()
    [claimed] = await queue.claim(1, "w")
    assert claimed.lock_token is not None
    await queue.cancel(claimed.id, actor="ops")
    before = await queue.get(claimed.id)
    now = clock.now()
    heads = await queue.store.complete(
        [(claimed.id, claimed.lock_token, None)], now, bulk_event(Action.COMPLETE, now, "w")
    )
    assert heads == {}
    assert await queue.get(claimed.id) == before


async def test_a_routed_admission_writes_what_decide_would(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    tasks = await make(queue, clock)
    now = clock.advance(5)
    wants = {
        t.id: expected(t, Request(Action.ADMIT, now, actor="scheduler", agent="fixer"))
        for t in tasks
    }
    event = bulk_event(Action.ADMIT, now, "scheduler", "fixer")
    async with queue.store.transaction() as tx:
        ids = await (await tx.admit_ids([t.id for t in tasks], now, event, "fixer")).get()
    assert set(ids) == set(wants)
    for task in await queue.store.get_tasks(ids):
        image, wanted = wants[task.id]
        assert task.agent == "fixer"
        assert_same(task, image)
        await assert_last_event(queue, task, wanted)


async def test_a_claim_that_admits_writes_what_decide_would_admitting_then_claiming(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """Under a global cap alone a claim admits what it takes (ClaimParams.admit): each
    pending task it takes ends as decide() leaves it after an ADMIT then a CLAIM by the
    worker, with both events, hashes and the admit event's row signature (verify) as the
    Python chain writes them."""
    tasks = await make(queue, clock)
    now = clock.advance(3)
    wants = {t.id: expected(t, Request(Action.ADMIT, now, actor="worker-7")) for t in tasks}
    settings = queue.settings.queue
    params = ClaimParams(
        10,
        now,
        bulk_event(Action.CLAIM, now, "worker-7"),
        settings.aging_interval_secs,
        settings.lease_ttl_secs,
        settings.deadline_grace_secs,
        admit=ClaimAdmission(100, False, bulk_event(Action.ADMIT, now, "worker-7")),
    )
    claimed = await queue.store.claim(params)
    assert {t.id for t in claimed} == set(wants)
    for task in claimed:
        admitted, admit_event = wants[task.id]
        image, claim_event = expected(admitted, claim_request(queue, task, now))
        assert_same(task, image)
        assert_same(await queue.get(task.id), image)
        events = await queue.events(task.id)
        for got, wanted in ((events[-2], admit_event), (events[-1], claim_event)):
            for name in ("seq", "at", "from_state", "to_state", "action", "actor", "data"):
                assert getattr(got, name) == getattr(wanted, name), name
            assert got.hash == wanted.hash
    assert (await queue.verify()).ok
    # verify checks the head event's row signature; the admit event's, no longer the head,
    # must sign the row as it stood queued (no worker yet), as the ADMIT alone writes it.
    async with queue.store.audit_snapshot() as snapshot:
        heads = {h.task_id: h.row async for h in snapshot.heads}
        macs = {(e.task_id, e.action): (e.hash, e.row_mac) async for e in snapshot.events}
    for task in claimed:
        row = heads[task.id]
        assert row is not None
        admit_hash, mac = macs[(task.id, "admit")]
        queued = replace(row, state="queued", assigned_to=None)
        assert mac == row_mac(*_columns(queued, admit_hash))


def _columns(row: RowFields, event_hash: str) -> tuple[Any, ...]:
    """What row_mac takes for ``row`` signed by the event of ``event_hash``."""
    return (
        event_hash,
        row.state,
        row.priority,
        row.payload,
        row.result,
        row.assigned_to,
        row.approved_by,
        row.retry_count,
    )
