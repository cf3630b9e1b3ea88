"""The store contract suite: every Store and Tx operation called directly, on every backend.

Modelled on River's riverdrivertest: one test (or a few) per operation, each run on SQLite and on
the real PostgreSQL server. State is set up through the domain and service functions (records
built by ``service.records.new_record``, lapses taken back by the scheduler's own steps); the
operation under test is always called on the store or on a transaction directly.

The operations that take more than four arguments (``claim``, ``admit``,
``Tx.admission_candidates``) are called only through the wrappers below, so that a change of their
signature (one parameter object) is adapted here and nowhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import pytest

from agentqueue import ManualClock
from agentqueue.config import Settings
from agentqueue.domain.models import Event, Task
from agentqueue.domain.states import (
    Action,
    BulkEvent,
    Refusal,
    Request,
    TaskState,
    bulk_event,
    decide,
)
from agentqueue.scheduler.steps import promote_due_retries, reclaim_lapsed
from agentqueue.service.records import ADMITTER, new_record, stamp
from agentqueue.service.runtime import Runtime
from agentqueue.service.submit import build_task
from agentqueue.spec import parse_specs
from agentqueue.store import Change, NewTask, Store, Tx, make_store
from agentqueue.store.base import (
    AdmitParams,
    Candidate,
    CandidateQuery,
    ClaimAdmission,
    ClaimParams,
)

_QUEUE = Settings().queue
LEASE_TTL = _QUEUE.lease_ttl_secs
GRACE = _QUEUE.deadline_grace_secs
AGING = _QUEUE.aging_interval_secs
WORKER = "worker-1"


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """The real store for the test's database, opened (and migrated), closed afterwards."""
    s = make_store(db_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def rt(store: Store, settings: Settings, clock: ManualClock) -> Runtime:
    """Service runtime over the test's store and manual clock (for setting up state)."""
    return Runtime(store=store, settings=settings, clock=clock, spread=lambda: 0.5)


# --- the wide operations, called only through these ------------------------------------------


async def claim(
    store: Store,
    limit: int,
    now: datetime,
    event: BulkEvent | None = None,
    *,
    worker: str = WORKER,
    task_types: Sequence[str] | None = None,
    aging_secs: float = AGING,
    ttl_secs: float = LEASE_TTL,
    grace_secs: float = GRACE,
    paused: Sequence[str] = (),
    agents: Sequence[str] | None = None,
    max_active: int | None = None,
    one_tenant: bool = False,
) -> list[Task]:
    """``Store.claim``; the event defaults to a CLAIM by ``worker`` at ``now``. With
    ``max_active``, a claim that admits (ClaimParams.admit: its ADMIT by ``worker`` at
    ``now``)."""
    event = event or bulk_event(Action.CLAIM, now, worker)
    admit = None
    if max_active is not None:
        admit = ClaimAdmission(max_active, one_tenant, bulk_event(Action.ADMIT, now, worker))
    return await store.claim(
        ClaimParams(
            limit, now, event, aging_secs, ttl_secs, grace_secs, task_types, paused, agents, admit
        )
    )


def admit_params(
    limit: int,
    now: datetime,
    event: BulkEvent | None = None,
    *,
    aging_secs: float = AGING,
    paused: Sequence[str] = (),
) -> AdmitParams:
    """What ``Store.admit`` takes; the event defaults to an ADMIT by the scheduler at ``now``."""
    event = event or bulk_event(Action.ADMIT, now, ADMITTER)
    return AdmitParams(limit, now, aging_secs, event, paused)


async def admit(store: Store, limit: int, now: datetime, *args: Any, **kw: Any) -> list[UUID]:
    """``Store.admit`` (arguments as ``admit_params``)."""
    return await store.admit(admit_params(limit, now, *args, **kw))


async def admission_candidates(
    tx: Tx,
    now: datetime,
    tenants: Sequence[str],
    per_tenant: int,
    *,
    skip_types: Sequence[str] = (),
    paused: Sequence[str] = (),
) -> list[Candidate]:
    """``Tx.admission_candidates``."""
    query = CandidateQuery(now, tenants, per_tenant, skip_types, paused)
    return await (await tx.admission_candidates(query)).get()


# --- builders --------------------------------------------------------------------------------


def build(rt: Runtime, *, admitted: bool = False, **fields: Any) -> NewTask:
    """A new task record as submit builds it (spec validated, creation event chained, held in
    blocked when it has dependencies); with ``admitted`` it is recorded as admitted at submit
    (state queued)."""
    fields.setdefault("title", "Fix login")
    fields.setdefault("task_type", "bugfix")
    [spec] = parse_specs([fields], defaults={"tenant": rt.settings.queue.default_tenant})
    task = build_task(rt, spec)
    pipeline = rt.pipelines.get(task.kind)
    assert pipeline is not None
    hold = pipeline.hold_new(task)  # dependencies hold a task in blocked, as at submit
    return new_record(task, spec.requested_by, ADMITTER if admitted else None, hold)


async def insert(rt: Runtime, *, admitted: bool = False, **fields: Any) -> Task:
    """Store one new task (pending, or queued with ``admitted``) and return it as stored."""
    record = build(rt, admitted=admitted, **fields)
    inserted = await rt.store.insert_tasks([record])
    assert record.task.id in inserted
    return record.task.evolve(seq=inserted[record.task.id])


async def claimed(rt: Runtime, worker: str = WORKER, **fields: Any) -> Task:
    """A new task, queued and then claimed by ``worker``; it carries its lock_token."""
    fields.setdefault("task_type", f"type-{worker}")
    task = await insert(rt, admitted=True, **fields)
    [got] = await claim(rt.store, 1, rt.clock.now(), worker=worker, task_types=[task.task_type])
    assert got.id == task.id and got.lock_token is not None
    return got


async def lapse(rt: Runtime, clock: ManualClock) -> list[Task]:
    """Let every lease run out and have the scheduler take them back (retrying)."""
    clock.advance(LEASE_TTL + GRACE + 1)
    return await reclaim_lapsed(rt)


async def reclaimed(rt: Runtime, clock: ManualClock, old: Task, worker: str = "worker-2") -> Task:
    """Take ``old``'s lease back after it lapsed, let the retry come due, admit it and claim it
    again for ``worker``: the task is executing again under a new lock_token."""
    assert old.id in {t.id for t in await lapse(rt, clock)}
    [back] = await rt.store.get_tasks([old.id])
    assert back.state is TaskState.RETRYING and back.run_after is not None
    clock.set(max(clock.now(), back.run_after))
    assert old.id in {t.id for t in await promote_due_retries(rt)}
    async with rt.store.transaction() as tx:
        assert await (
            await tx.admit_ids([old.id], clock.now(), bulk_event(Action.ADMIT, clock.now(), "s"))
        ).get()
    [new] = await claim(rt.store, 1, clock.now(), worker=worker, task_types=[old.task_type])
    assert new.id == old.id and new.lock_token not in (None, old.lock_token)
    return new


async def waiting_on_tool(
    rt: Runtime, call_id: str = "c1", tool: str = "search", timeout_secs: float = 60, **fields: Any
) -> Task:
    """A claimed task that asked for ``tool`` (call ``call_id``): waiting_tool, holding no
    lease."""
    task = await claimed(rt, **fields)
    call = {"id": call_id, "name": tool, "args": {}, "timeout_secs": timeout_secs}
    now = rt.clock.now()
    req = Request(Action.WAIT_TOOL, now, task.assigned_to or WORKER, lock_token=task.lock_token,
                  tool_call=call)  # fmt: skip
    async with rt.store.transaction() as tx:
        assert await tx.apply([change(task, req)]) == {task.id}
    [waiting] = await rt.store.get_tasks([task.id])
    assert waiting.state is TaskState.WAITING_TOOL
    return waiting


def change(task: Task, request: Request) -> Change:
    """The guarded write of ``request`` decided on ``task`` as the caller sees it."""
    outcome = decide(task, request)
    assert not isinstance(outcome, Refusal), outcome  # the test set up the wrong state
    return stamp(task, outcome)


async def snapshot(store: Store, task_id: UUID) -> tuple[Task, list[Event]]:
    """The task row and its events as stored now."""
    [task] = await store.get_tasks([task_id])
    return task, await store.events(task_id)
