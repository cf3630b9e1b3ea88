"""R2 on each backend: one live task per (tenant, source, source_id), one task per idempotency
key, P0 needs a key, bulk submits dedup inside one batch, and all of it holds across processes."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest

import agentqueue
from agentqueue import AsyncQueue, InvalidInput, TaskState

ISSUE = {"title": "Fix login", "task_type": "bugfix", "source": "issue"}


async def finish_it(queue: AsyncQueue, task_id: Any) -> None:
    await queue.admit()
    claimed = await queue.claim(100, "worker-1")
    [task] = [t for t in claimed if t.id == task_id]
    assert task.lock_token is not None
    await queue.complete(task.id, task.lock_token)


async def test_second_submit_of_a_live_source_returns_the_live_task(queue: AsyncQueue) -> None:
    first = await queue.submit(**ISSUE, source_id="octo/repo#12")
    second = await queue.submit(**{**ISSUE, "title": "Another title"}, source_id="octo/repo#12")
    assert first.created and first.matched_by is None
    assert not second.created and second.matched_by == "source"
    assert second.task.id == first.task.id and second.task.title == "Fix login"
    assert (await queue.stats()).total == 1


async def test_source_dedup_holds_in_every_live_state(queue: AsyncQueue) -> None:
    first = await queue.submit(**ISSUE, source_id="octo/repo#1")
    await queue.admit()
    again = await queue.submit(**ISSUE, source_id="octo/repo#1")
    assert again.task.id == first.task.id and again.task.state is TaskState.QUEUED
    await queue.claim(1, "worker-1")
    again = await queue.submit(**ISSUE, source_id="octo/repo#1")
    assert again.task.id == first.task.id and again.task.state is TaskState.EXECUTING
    assert not again.created and (await queue.stats()).total == 1


async def test_new_task_for_a_source_once_the_live_one_completed(queue: AsyncQueue) -> None:
    first = await queue.submit(**ISSUE, source_id="octo/repo#12")
    await finish_it(queue, first.task.id)
    second = await queue.submit(**ISSUE, source_id="octo/repo#12")
    assert second.created and second.task.id != first.task.id
    third = await queue.submit(**ISSUE, source_id="octo/repo#12")
    assert not third.created and third.task.id == second.task.id


async def test_new_task_for_a_source_once_the_live_one_was_cancelled(queue: AsyncQueue) -> None:
    first = await queue.submit(**ISSUE, source_id="octo/repo#12")
    await queue.cancel(first.task.id, reason="wrong repo")
    second = await queue.submit(**ISSUE, source_id="octo/repo#12")
    assert second.created and second.task.id != first.task.id
    assert (await queue.get(first.task.id)).state is TaskState.CANCELLED


async def test_same_source_in_another_tenant_is_another_task(queue: AsyncQueue) -> None:
    a = await queue.submit(**ISSUE, source_id="octo/repo#12", tenant="a")
    b = await queue.submit(**ISSUE, source_id="octo/repo#12", tenant="b")
    assert a.created and b.created and a.task.id != b.task.id
    assert (a.task.tenant, b.task.tenant) == ("a", "b")


async def test_same_source_id_from_another_source_kind_is_another_task(
    queue: AsyncQueue,
) -> None:
    issue = await queue.submit(**ISSUE, source_id="octo/repo#12")
    pr = await queue.submit(**{**ISSUE, "source": "pr"}, source_id="octo/repo#12")
    assert issue.created and pr.created and issue.task.id != pr.task.id


async def test_tasks_without_source_id_never_dedup_by_source(queue: AsyncQueue) -> None:
    a = await queue.submit(**ISSUE)
    b = await queue.submit(**ISSUE)
    assert a.created and b.created and a.task.id != b.task.id


async def test_same_idempotency_key_returns_the_same_task(queue: AsyncQueue) -> None:
    first = await queue.submit(title="Refund", task_type="payments", idempotency_key="refund-7")
    second = await queue.submit(title="Refund", task_type="payments", idempotency_key="refund-7")
    assert not second.created and second.matched_by == "idempotency_key"
    assert second.task.id == first.task.id


async def test_same_idempotency_key_returns_the_same_task_even_after_it_completed(
    queue: AsyncQueue,
) -> None:
    first = await queue.submit(title="Refund", task_type="payments", idempotency_key="refund-7")
    await finish_it(queue, first.task.id)
    again = await queue.submit(title="Refund", task_type="payments", idempotency_key="refund-7")
    assert not again.created and again.matched_by == "idempotency_key"
    assert again.task.id == first.task.id and again.task.state is TaskState.COMPLETED
    assert (await queue.stats()).total == 1


async def test_same_idempotency_key_in_another_tenant_is_another_task(queue: AsyncQueue) -> None:
    a = await queue.submit(title="Refund", task_type="payments", idempotency_key="k", tenant="a")
    b = await queue.submit(title="Refund", task_type="payments", idempotency_key="k", tenant="b")
    assert a.created and b.created and a.task.id != b.task.id


async def test_p0_task_without_idempotency_key_is_refused_and_nothing_is_written(
    queue: AsyncQueue,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.submit(title="Delete the account", task_type="deletion", priority="P0")
    assert "idempotency_key" in refused.value.fields
    assert (await queue.stats()).total == 0
    assert (await queue.verify()).events == 0


async def test_bulk_submit_with_one_p0_task_without_key_writes_nothing(queue: AsyncQueue) -> None:
    with pytest.raises(InvalidInput) as refused:
        await queue.submit_many(
            [
                {"title": "fine", "task_type": "docs"},
                {"title": "grant admin", "task_type": "permissions", "priority": 0},
            ]
        )
    assert refused.value.fields == ["tasks[1].idempotency_key"]
    assert (await queue.stats()).total == 0


async def test_p0_task_with_idempotency_key_is_accepted(queue: AsyncQueue) -> None:
    result = await queue.submit(
        title="Delete the account", task_type="deletion", priority="P0", idempotency_key="del-1"
    )
    assert result.created and result.task.priority == 0


async def test_bulk_submit_dedups_duplicates_inside_one_batch(queue: AsyncQueue) -> None:
    results = await queue.submit_many(
        [
            {**ISSUE, "source_id": "octo/repo#1"},
            {"title": "k", "task_type": "docs", "idempotency_key": "key-1"},
            {**ISSUE, "source_id": "octo/repo#1", "title": "duplicate"},
            {**ISSUE, "source_id": "octo/repo#2"},
            {"title": "k again", "task_type": "docs", "idempotency_key": "key-1"},
            {**ISSUE, "source_id": "octo/repo#1", "tenant": "other"},
        ]
    )
    assert [r.created for r in results] == [True, True, False, True, False, True]
    assert [r.matched_by for r in results] == [None, None, "source", None, "idempotency_key", None]
    ids = [r.task.id for r in results]
    assert ids[2] == ids[0] and ids[4] == ids[1]
    assert len(set(ids)) == 4
    assert (await queue.stats()).total == 4
    stored = {t.id: t.title for t in (await queue.list(limit=10)).items}
    assert stored[ids[0]] == "Fix login" and stored[ids[1]] == "k"
    assert (await queue.verify()).ok


async def test_bulk_submit_matches_tasks_stored_before_it(queue: AsyncQueue) -> None:
    live = await queue.submit(**ISSUE, source_id="octo/repo#1")
    keyed = await queue.submit(title="k", task_type="docs", idempotency_key="key-1")
    results = await queue.submit_many(
        [
            {**ISSUE, "source_id": "octo/repo#1"},
            {"title": "new", "task_type": "docs"},
            {"title": "k", "task_type": "docs", "idempotency_key": "key-1"},
        ]
    )
    assert [r.created for r in results] == [False, True, False]
    assert results[0].task.id == live.task.id and results[2].task.id == keyed.task.id
    assert (await queue.stats()).total == 3


async def test_submit_returns_each_task_as_stored(queue: AsyncQueue) -> None:
    created = await queue.submit(**ISSUE, source_id="octo/repo#1", payload={"n": 1})
    assert created.task.seq > 0
    assert created.task == await queue.get(created.task.id)
    matched = await queue.submit(**ISSUE, source_id="octo/repo#1")
    assert matched.task == await queue.get(created.task.id)
    results = await queue.submit_many(
        [{"title": f"t{i}", "task_type": "docs", "idempotency_key": f"k{i % 3}"} for i in range(5)]
    )
    for result in results:
        assert result.task == await queue.get(result.task.id)
    assert [r.task.seq for r in results[:3]] == sorted({r.task.seq for r in results})


async def test_submit_many_large_batch_keeps_input_order(queue: AsyncQueue) -> None:
    specs = [
        {"title": f"t{i}", "task_type": "docs", "source_id": f"s{i % 1500}"} for i in range(2500)
    ]
    results = await queue.submit_many(specs)
    assert [r.task.title for r in results[:1500]] == [f"t{i}" for i in range(1500)]
    assert all(r.created for r in results[:1500])
    assert not any(r.created for r in results[1500:])
    assert [r.task.id for r in results[1500:]] == [r.task.id for r in results[:1000]]
    assert (await queue.stats()).total == 1500


# --- across processes ------------------------------------------------------------------------

ROUNDS = 5


def _submit_in_rounds(url: str, mode: str, barrier: Barrier, out: Any) -> None:
    """A separate process: each round, submit the same task as every other process at once."""
    q = agentqueue.Queue(url)
    try:
        for round_no in range(ROUNDS):
            barrier.wait(timeout=60)
            fields: dict[str, Any] = {"title": "racy", "task_type": "bugfix", "source": "issue"}
            if mode == "source":
                fields["source_id"] = "octo/repo#99"
            else:
                fields["idempotency_key"] = f"key-{round_no}"
            result = q.submit(**fields)
            out.put((round_no, str(result.task.id), result.created, result.matched_by))
            barrier.wait(timeout=60)  # the parent checks and cleans up between the two
    except BaseException as exc:
        out.put(("error", repr(exc), False, None))
        barrier.abort()
        raise
    finally:
        q.close()


async def _race(queue: AsyncQueue, url: str, mode: str, processes: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_submit_in_rounds, args=(url, mode, barrier, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        for round_no in range(ROUNDS):
            barrier.wait(timeout=120)
            replies = [out.get(timeout=120) for _ in range(processes)]
            assert all(r[0] == round_no for r in replies), replies
            ids = {r[1] for r in replies}
            assert len(ids) == 1, f"round {round_no}: several tasks {ids}"
            assert sorted(r[2] for r in replies) == [False] * (processes - 1) + [True]
            expected_match = "source" if mode == "source" else "idempotency_key"
            assert {r[3] for r in replies if not r[2]} == {expected_match}
            if mode == "source":
                live = await queue.list(state=[s for s in TaskState if not s.terminal])
                assert [str(t.id) for t in live.items] == list(ids)
                # Let the next round race to create the next live task for the same source.
                await queue.cancel(next(iter(ids)), reason=f"round {round_no} done")
            barrier.wait(timeout=120)
    except BaseException:
        barrier.abort()  # release the processes at once rather than at their timeout
        raise
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * processes
    assert (await queue.stats()).total == ROUNDS
    assert (await queue.verify()).ok


async def test_processes_submitting_one_source_at_once_leave_exactly_one_live_task(
    db_url: str,
) -> None:
    async with AsyncQueue(db_url) as queue:
        await _race(queue, db_url, "source", processes=4)
        cancelled = (await queue.stats()).by_state[TaskState.CANCELLED]
        assert cancelled == ROUNDS


async def test_processes_submitting_one_idempotency_key_at_once_create_exactly_one_task(
    db_url: str,
) -> None:
    async with AsyncQueue(db_url) as queue:
        await _race(queue, db_url, "key", processes=4)
