"""Contract of the audit read (R3): every task head and every event from one snapshot, in the
order verification walks them."""

from __future__ import annotations

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
