"""Contract of the GitHub intake's transaction operations (R18): a delivery id recorded once
with its answer, the ordering state of a source, its live tasks locked, and inserts inside the
transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentqueue import ManualClock
from agentqueue.domain.states import Action, Request
from agentqueue.service.records import decide_and_apply
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import IntakeSource

from .conftest import build, insert


async def test_a_delivery_id_is_claimed_once_and_keeps_its_answer(
    store: Store, clock: ManualClock
) -> None:
    now = clock.now()
    async with store.transaction() as tx:
        assert await tx.claim_delivery("d-1", "issues", now)
        assert await tx.delivery_answer("d-1") == {}
        await tx.record_delivery_answer("d-1", {"tasks": [{"outcome": "created"}]})
    async with store.transaction() as tx:
        assert not await tx.claim_delivery("d-1", "issues", now)
        assert await tx.delivery_answer("d-1") == {"tasks": [{"outcome": "created"}]}
        assert await tx.delivery_answer("d-2") is None


async def test_a_claim_rolled_back_leaves_the_id_free(store: Store, clock: ManualClock) -> None:
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            assert await tx.claim_delivery("d-9", "issues", clock.now())
            raise RuntimeError("the delivery failed")
    async with store.transaction() as tx:
        assert await tx.claim_delivery("d-9", "issues", clock.now())


async def test_a_sources_ordering_state_starts_empty_and_keeps_what_is_saved(
    store: Store, clock: ManualClock
) -> None:
    at = clock.now()
    async with store.transaction() as tx:
        empty = await tx.lock_intake_source("t", "pr", "o/r#1")
        assert empty == IntakeSource("t", "pr", "o/r#1")
        saved = IntakeSource("t", "pr", "o/r#1", "closed", at, "a" * 40, at - timedelta(hours=1))
        await tx.save_intake_source(saved)
    async with store.transaction() as tx:
        assert await tx.lock_intake_source("t", "pr", "o/r#1") == saved
        assert await tx.lock_intake_source("t", "issue", "o/r#1") == IntakeSource(
            "t", "issue", "o/r#1"
        )


async def test_live_tasks_of_a_source_are_found_and_inserts_join_the_transaction(
    store: Store, rt: Runtime, clock: ManualClock
) -> None:
    live = await insert(rt, source="issue", source_id="o/r#2", tenant="t")
    async with store.transaction() as tx:
        assert [t.id for t in await tx.lock_live_by_source("t", "issue", "o/r#2")] == [live.id]
        assert await tx.lock_live_by_source("u", "issue", "o/r#2") == []
        # The live task holds the source: a second insert is skipped.
        twin = build(rt, source="issue", source_id="o/r#2", tenant="t")
        assert await tx.insert_tasks([twin]) == {}
        await decide_and_apply(tx, [live], lambda _t: Request(Action.CANCEL, clock.now()))
        assert await tx.lock_live_by_source("t", "issue", "o/r#2") == []
        # Once it is cancelled in this transaction, the new one goes in, in the same one.
        assert list(await tx.insert_tasks([twin])) == [twin.task.id]
        assert await tx.insert_tasks([]) == {}
    [found] = await store.get_tasks([twin.task.id])
    assert found.source_id == "o/r#2"
