"""Contract of leadership (R21) and pausing: a lease per leadership name with terms, and the
set of paused task types."""

from __future__ import annotations

from datetime import timedelta

from agentqueue import ManualClock
from agentqueue.store import Store
from agentqueue.store.base import PausedType


async def test_lead_takes_renews_and_refuses_while_another_lease_holds(
    store: Store, clock: ManualClock
) -> None:
    """lead gives a free leadership to the caller (term 1), renews it for the holder in the
    same term, refuses another holder while the lease holds, and hands it over with a new term
    once it has expired."""
    t0 = clock.now()
    assert await store.leader("scheduler") is None
    assert await store.lead("scheduler", "a", t0, 10) == 1
    t1 = t0 + timedelta(seconds=5)
    assert await store.lead("scheduler", "a", t1, 10) == 1
    assert await store.lead("scheduler", "b", t1, 10) is None
    info = await store.leader("scheduler")
    assert info is not None
    assert (info.name, info.holder, info.term) == ("scheduler", "a", 1)
    assert (info.acquired_at, info.renewed_at) == (t0, t1)
    assert info.expires_at == t1 + timedelta(seconds=10)
    assert await store.lead("other", "b", t1, 10) == 1  # names are independent
    t2 = t1 + timedelta(seconds=10)
    assert await store.lead("scheduler", "b", t2, 10) == 2
    info = await store.leader("scheduler")
    assert info is not None and (info.holder, info.term, info.acquired_at) == ("b", 2, t2)


async def test_resign_ends_the_holders_lease_only(store: Store, clock: ManualClock) -> None:
    """resign by someone else changes nothing; by the holder it ends the lease at once, so
    another takes it in the next term."""
    now = clock.now()
    assert await store.lead("scheduler", "a", now, 60) == 1
    await store.resign("scheduler", "b")
    assert await store.lead("scheduler", "b", now, 60) is None
    await store.resign("scheduler", "a")
    info = await store.leader("scheduler")
    assert info is not None and info.holder == "a" and info.expires_at <= now
    assert await store.lead("scheduler", "b", now, 60) == 2
    await store.resign("nobody-leads-this", "a")


async def test_pause_resume_and_paused(store: Store, clock: ManualClock) -> None:
    """pause records a type once (a second pause keeps the first record), paused lists them by
    type, resume removes one and reports whether it was paused."""
    now = clock.now()
    assert await store.paused() == []
    await store.pause("docs", "alice", "incident", now)
    await store.pause("bugfix", "bob", "", now)
    await store.pause("docs", "carol", "again", now + timedelta(seconds=1))
    assert await store.paused() == [
        PausedType("bugfix", now, "bob", ""),
        PausedType("docs", now, "alice", "incident"),
    ]
    assert await store.resume("docs")
    assert not await store.resume("docs")
    assert [p.task_type for p in await store.paused()] == ["bugfix"]
