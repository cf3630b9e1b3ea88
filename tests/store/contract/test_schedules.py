"""Contract of cron schedules (R18): named per tenant, listed, removed, found when due, and
moved on under a guard so one of several schedulers fires a slot."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from agentqueue import ManualClock
from agentqueue.domain.schedule import CatchUp, Schedule
from agentqueue.store import Store


def schedule(name: str, next_at: datetime, tenant: str = "default") -> Schedule:
    """A schedule of ``tenant`` that next fires at ``next_at``."""
    return Schedule(
        tenant=tenant,
        name=name,
        cron="*/5 * * * *",
        tz="UTC",
        task={"title": "Nightly", "task_type": "report"},
        catch_up=CatchUp.SKIP,
        next_at=next_at,
        created_by="alice",
        created_at=next_at - timedelta(minutes=5),
        updated_at=next_at - timedelta(minutes=5),
    )


async def test_insert_schedule_refuses_a_name_taken_in_the_tenant(
    store: Store, clock: ManualClock
) -> None:
    """insert_schedule adds a schedule; a second one by that name in the tenant is refused and
    leaves the first as it was; another tenant may use the name."""
    now = clock.now()
    first = schedule("nightly", now)
    assert await store.insert_schedule(first)
    assert not await store.insert_schedule(replace(first, cron="0 * * * *"))
    assert await store.insert_schedule(schedule("nightly", now, tenant="other"))
    assert await store.list_schedules("default") == [first]


async def test_list_schedules_by_tenant_and_name(store: Store, clock: ManualClock) -> None:
    """list_schedules returns a tenant's schedules by name, or every tenant's by tenant and
    name."""
    now = clock.now()
    for tenant, name in [("b", "z"), ("a", "y"), ("b", "a")]:
        assert await store.insert_schedule(schedule(name, now, tenant))
    assert [(s.tenant, s.name) for s in await store.list_schedules()] == [
        ("a", "y"),
        ("b", "a"),
        ("b", "z"),
    ]
    assert [s.name for s in await store.list_schedules("b")] == ["a", "z"]
    assert await store.list_schedules("c") == []


async def test_delete_schedule_returns_what_it_removed(store: Store, clock: ManualClock) -> None:
    """delete_schedule removes the tenant's schedule and returns it; None when there is none."""
    s = schedule("nightly", clock.now())
    await store.insert_schedule(s)
    assert await store.delete_schedule("other", "nightly") is None
    assert await store.delete_schedule("default", "nightly") == s
    assert await store.delete_schedule("default", "nightly") is None
    assert await store.list_schedules() == []


async def test_due_schedules_earliest_first_up_to_the_limit(
    store: Store, clock: ManualClock
) -> None:
    """due_schedules returns schedules whose next_at has come, earliest first, up to the
    limit."""
    now = clock.now()
    later = schedule("later", now + timedelta(minutes=5))
    early = schedule("early", now - timedelta(minutes=5))
    on_time = schedule("now", now, tenant="b")
    for s in (later, early, on_time):
        await store.insert_schedule(s)
    assert await store.due_schedules(now, 10) == [early, on_time]
    assert await store.due_schedules(now, 1) == [early]
    assert await store.due_schedules(now - timedelta(minutes=10), 10) == []


async def test_advance_schedule_moves_on_only_from_the_slot_read(
    store: Store, clock: ManualClock
) -> None:
    """advance_schedule moves next_at on and records the fired slot when the schedule still
    waits for the slot read; a second scheduler holding the same old read is refused."""
    now = clock.now()
    s = schedule("nightly", now)
    await store.insert_schedule(s)
    nxt = now + timedelta(minutes=5)
    assert await store.advance_schedule(s, nxt, now, now)
    assert not await store.advance_schedule(s, nxt + timedelta(minutes=5), now, now)
    [moved] = await store.list_schedules()
    assert moved.next_at == nxt and moved.last_slot_at == now and moved.last_fired_at == now
    assert moved.updated_at == now
    skip_to = nxt + timedelta(minutes=5)
    assert await store.advance_schedule(moved, skip_to, None, nxt)
    [skipped] = await store.list_schedules()
    assert skipped.next_at == skip_to and skipped.last_slot_at == now
    assert skipped.last_fired_at == now
    gone = schedule("gone", now)
    assert not await store.advance_schedule(gone, nxt, now, now)


async def test_work_hints_name_the_earliest_slot_of_any_schedule(
    store: Store, clock: ManualClock
) -> None:
    """work_hints carries the earliest next_at of every tenant's schedules (what the cron step
    waits for before it reads the due ones), None with no schedule; it moves on with the
    schedule."""
    now = clock.now()
    assert (await store.work_hints(now)).next_schedule_at is None
    later = schedule("later", now + timedelta(minutes=10))
    soon = schedule("soon", now + timedelta(minutes=5), tenant="b")
    for s in (later, soon):
        await store.insert_schedule(s)
    assert (await store.work_hints(now)).next_schedule_at == soon.next_at
    assert await store.advance_schedule(soon, now + timedelta(minutes=20), now, now)
    assert (await store.work_hints(now)).next_schedule_at == later.next_at
    await store.delete_schedule("default", "later")
    assert (await store.work_hints(now)).next_schedule_at == now + timedelta(minutes=20)
