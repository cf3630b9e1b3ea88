"""Contract of the audit read (R3): every task head and every event from one snapshot, in the
order verification walks them."""

from __future__ import annotations

from dataclasses import replace

from agentqueue.domain.audit import ANCHOR_KIND, GENESIS, purge_record, purged_ids, roll
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store

from .conftest import build, claimed, insert


async def test_audit_snapshot_streams_heads_by_id_and_events_by_task_and_seq(
    store: Store, rt: Runtime
) -> None:
    """audit_snapshot yields one head per task ordered by id (its audit position, hash and
    state) and every event ordered by (task id, seq), each event as stored."""
    tasks = [await claimed(rt), await insert(rt, tenant="b"), await insert(rt, admitted=True)]
    async with store.audit_snapshot() as snap:
        heads = [h async for h in snap.heads]
        events = [e async for e in snap.events]
    assert [h.task_id for h in heads] == sorted(t.id for t in tasks)
    by_id = {t.id: t for t in tasks}
    for head in heads:
        task = by_id[head.task_id]
        assert (head.tenant, head.event_seq, head.last_hash, head.state) == (
            task.tenant,
            task.event_seq,
            task.last_hash,
            task.state.value,
        )
    assert [(e.task_id, e.seq) for e in events] == sorted(
        (t.id, seq) for t in tasks for seq in range(1, t.event_seq + 1)
    )
    for task in tasks:
        stored = await store.events(task.id)
        mine = [e for e in events if e.task_id == task.id]
        assert [(e.seq, e.hash, e.action) for e in mine] == [
            (e.seq, e.hash, e.action) for e in stored
        ]


async def test_audit_snapshot_does_not_see_later_commits(store: Store, rt: Runtime) -> None:
    """A task inserted after the snapshot began reading is in neither stream."""
    first = await insert(rt)
    async with store.audit_snapshot() as snap:
        [head] = [h async for h in snap.heads]
        later = build(rt)
        assert later.task.id in await store.insert_tasks([later])
        events = [e async for e in snap.events]
    assert head.task_id == first.id
    assert [e.task_id for e in events] == [first.id]


async def test_audit_snapshot_of_an_empty_store_is_empty(store: Store) -> None:
    """With no tasks both streams end at once."""
    async with store.audit_snapshot() as snap:
        assert [h async for h in snap.heads] == []
        assert [e async for e in snap.events] == []


async def test_anchor_audit_covers_the_events_after_the_last_anchor_and_signs_after_them(
    store: Store, rt: Runtime
) -> None:
    """anchor_audit covers the global numbers after the last anchor (1, 2, ... in the order
    the events were written, at most ``limit`` a step; with no transaction rolled back, no
    gap), records an anchor whose count, start and running hash cover them, and returns None
    when nothing waits."""
    first = await claimed(rt)
    now = rt.clock.now()
    one = await store.anchor_audit(now, 2)
    assert one is not None and one.count == 2 and one.kind == ANCHOR_KIND and one.id is not None
    assert (one.after, one.gaps) == (0, ())
    two = await store.anchor_audit(now, 100)
    assert two is not None and two.count == first.event_seq and two.id > one.id
    assert (two.after, two.gaps) == (2, ())
    assert await store.anchor_audit(now, 100) is None
    await insert(rt)
    three = await store.anchor_audit(now, 100)
    assert three is not None and three.count == first.event_seq + 1
    async with store.audit_snapshot() as snap:
        numbered = [n async for n in snap.numbered]
        anchors = [a async for a in snap.anchors]
        events = [e async for e in snap.events]
    assert [n for n, _ in numbered] == list(range(1, three.count + 1))
    digest = GENESIS
    for _, h in numbered:
        digest = roll(digest, h)
    assert digest == three.digest
    assert [a.id for a in anchors] == [one.id, two.id, three.id]
    assert anchors[-1] == three
    assert sorted(e.gseq or 0 for e in events) == list(range(1, three.count + 1))


async def test_record_audit_appends_a_signed_record_read_back_as_written(
    store: Store, rt: Runtime
) -> None:
    """record_audit (in a transaction) stores a purge record; the snapshot reads it back
    field for field, after the anchors written before it."""
    task = await insert(rt)
    record = purge_record(rt.clock.now(), [task.id])
    async with store.transaction() as tx:
        record_id = await tx.record_audit(record)
    async with store.audit_snapshot() as snap:
        [stored] = [a async for a in snap.anchors]
    assert stored == replace(record, id=record_id)
    assert purged_ids(stored) == {task.id}


async def test_audit_snapshot_reports_every_append_only_trigger_as_firing(store: Store) -> None:
    """On a migrated store every expected append-only trigger of the audit tables is there
    and fires."""
    async with store.audit_snapshot() as snap:
        guards = [g async for g in snap.guards]
    assert len(guards) == 4
    assert all(fires for _, fires in guards), guards
