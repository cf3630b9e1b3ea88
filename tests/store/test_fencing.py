"""R5-R8 on each backend: a lease taken back fences off its old lock_token, attempts time out,
retries wait out their backoff, exhausted tasks reach dead_letter and people act on them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from agentqueue import (
    AsyncQueue,
    LeaseLost,
    ManualClock,
    Outcome,
    OutcomeKind,
    Task,
    TaskState,
    TransitionRefused,
)
from agentqueue.config import Settings
from agentqueue.domain.states import Action, Request, decide_or_raise
from agentqueue.service.records import stamp

LEASE_TTL = 30.0
GRACE = Settings().queue.deadline_grace_secs  # 10 s: lease beyond the attempt deadline


async def claimed_task(queue: AsyncQueue, worker: str = "worker-1", **fields: Any) -> Task:
    """Submit one task, admit it and claim it; the claimed task carries its lock_token."""
    fields.setdefault("title", "Fix login")
    fields.setdefault("task_type", "bugfix")
    submitted = await queue.submit(**fields)
    await queue.admit()
    [task] = await queue.claim(1, worker)
    assert task.id == submitted.task.id and task.lock_token is not None
    return task


async def take_back(queue: AsyncQueue, clock: ManualClock) -> list[Task]:
    clock.advance(LEASE_TTL + 1)
    return await queue.reclaim_lapsed()


async def back_in_queue(queue: AsyncQueue, clock: ManualClock, task_id: UUID) -> None:
    """Let a retrying task's backoff elapse and admit it again."""
    task = await queue.get(task_id)
    assert task.state is TaskState.RETRYING and task.run_after is not None
    clock.set(max(clock.now(), task.run_after))
    assert [t.id for t in await queue.promote_due_retries()] == [task_id]
    assert [t.id for t in await queue.admit()] == [task_id]


async def event_count(queue: AsyncQueue, task_id: UUID) -> int:
    return len(await queue.events(task_id))


# --- fencing ---------------------------------------------------------------------------------


async def test_lapsed_lease_is_taken_back_as_retrying(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue)
    clock.advance(LEASE_TTL - 1)
    assert await queue.reclaim_lapsed() == []
    clock.advance(1)
    [back] = await queue.reclaim_lapsed()
    assert back.id == task.id and back.state is TaskState.RETRYING
    assert back.lock_token is None and back.assigned_to is None
    assert back.retry_count == 1 and back.error is not None and "lease lapsed" in back.error


async def test_old_token_cannot_heartbeat_after_the_lease_was_taken_back(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue)
    await take_back(queue, clock)
    reply = await queue.heartbeat([task])
    assert reply.held == frozenset()
    assert reply.lost == {task.id: TaskState.RETRYING}


@pytest.mark.parametrize("write", ["complete", "fail", "release"])
async def test_old_token_cannot_finish_after_the_lease_was_taken_back(
    queue: AsyncQueue, clock: ManualClock, write: str
) -> None:
    task = await claimed_task(queue)
    await take_back(queue, clock)
    before = await queue.get(task.id)
    with pytest.raises(LeaseLost):
        await _write(queue, write, task.id, task.lock_token)
    after = await queue.get(task.id)
    assert after == before
    assert await event_count(queue, task.id) == after.event_seq


async def _write(queue: AsyncQueue, write: str, task_id: UUID, token: Any) -> Task:
    if write == "complete":
        return await queue.complete(task_id, token, {"ok": True})
    if write == "fail":
        return await queue.fail(task_id, token, "boom")
    return await queue.release(task_id, token, "shutting down")


@pytest.mark.parametrize("write", ["complete", "fail", "release"])
async def test_old_token_stays_refused_while_a_new_claim_holds_the_task(
    queue: AsyncQueue, clock: ManualClock, write: str
) -> None:
    old = await claimed_task(queue, "worker-1")
    await take_back(queue, clock)
    await back_in_queue(queue, clock, old.id)
    [new] = await queue.claim(1, "worker-2")
    assert new.id == old.id and new.lock_token not in (None, old.lock_token)

    with pytest.raises(LeaseLost):
        await _write(queue, write, old.id, old.lock_token)
    reply = await queue.heartbeat([old, new])
    assert reply.held == frozenset({new.id})  # the same task, held by the new token only
    # The old token's heartbeat was refused even though the task is executing again.
    only_old = await queue.heartbeat([(old.id, old.lock_token)])
    assert only_old.lost == {old.id: TaskState.EXECUTING}

    done = await queue.complete(new.id, new.lock_token, {"patch": "diff"})
    assert done.state is TaskState.COMPLETED and done.result == {"patch": "diff"}
    assert done.assigned_to is None and done.lock_token is None
    with pytest.raises(LeaseLost):
        await queue.complete(new.id, new.lock_token, {"patch": "again"})
    assert (await queue.get(new.id)).result == {"patch": "diff"}
    assert (await queue.verify()).ok


async def test_batch_finish_reports_a_stale_token_as_refused_and_writes_the_rest(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    stale = await claimed_task(queue, title="stale")
    await take_back(queue, clock)
    fresh = await claimed_task(queue, title="fresh")
    assert fresh.lock_token is not None and stale.lock_token is not None
    replies = await queue.finish(
        [
            Outcome(stale.id, stale.lock_token, OutcomeKind.COMPLETED),
            Outcome(fresh.id, fresh.lock_token, OutcomeKind.COMPLETED, result=1),
        ]
    )
    done = replies[fresh.id]
    assert isinstance(done, Task) and done.state is TaskState.COMPLETED and done.result == 1
    refusal = replies[stale.id]
    assert not isinstance(refusal, Task)
    assert isinstance(refusal.error(), LeaseLost)
    assert (await queue.get(stale.id)).state is TaskState.RETRYING


async def test_each_claim_gets_a_different_token(queue: AsyncQueue, clock: ManualClock) -> None:
    task = await claimed_task(queue)
    tokens = {task.lock_token}
    for _ in range(3):
        await take_back(queue, clock)
        await back_in_queue(queue, clock, task.id)
        [again] = await queue.claim(1, "worker-1")
        tokens.add(again.lock_token)
    assert len(tokens) == 4 and None not in tokens


async def test_token_of_a_cancelled_executing_task_is_refused(queue: AsyncQueue) -> None:
    task = await claimed_task(queue)
    cancelled = await queue.cancel(task.id, actor="operator-7", reason="wrong repo")
    assert cancelled.state is TaskState.CANCELLED and cancelled.lock_token is None
    reply = await queue.heartbeat([task])
    assert reply.lost == {task.id: TaskState.CANCELLED} and not reply.held
    for write in ("complete", "fail", "release"):
        with pytest.raises(LeaseLost):
            await _write(queue, write, task.id, task.lock_token)
    assert (await queue.get(task.id)).state is TaskState.CANCELLED


async def test_token_is_refused_once_the_task_completed(queue: AsyncQueue) -> None:
    task = await claimed_task(queue)
    await queue.complete(task.id, task.lock_token)
    reply = await queue.heartbeat([task])
    assert reply.lost == {task.id: TaskState.COMPLETED}
    with pytest.raises(LeaseLost):
        await queue.fail(task.id, task.lock_token, "late failure")


async def test_heartbeat_for_an_unknown_task_is_lost_with_no_state(queue: AsyncQueue) -> None:
    task = await claimed_task(queue)
    ghost = (UUID(int=7), UUID(int=8))
    reply = await queue.heartbeat([task, ghost])
    assert reply.held == frozenset({task.id})
    assert reply.lost == {ghost[0]: None}


async def test_store_write_is_skipped_when_its_guard_no_longer_holds(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """The store applies a decided change only if the row is still where it was decided."""
    pending = (await queue.submit(title="t", task_type="docs")).task
    stored = await queue.get(pending.id)
    admit = stamp(stored, decide_or_raise(stored, Request(Action.ADMIT, clock.now(), "scheduler")))
    cancel = stamp(stored, decide_or_raise(stored, Request(Action.CANCEL, clock.now(), "ops")))
    async with queue.store.transaction() as tx:
        assert await tx.apply([admit]) == {pending.id}
    async with queue.store.transaction() as tx:
        assert await tx.apply([cancel]) == set()  # decided on a pending row; it is queued now
        # Right state, but an audit position that has moved on.
        stale = dataclasses.replace(cancel, expected_state=TaskState.QUEUED)
        assert await tx.apply([stale]) == set()
    task = await queue.get(pending.id)
    assert task.state is TaskState.QUEUED and task.event_seq == 2
    assert [e.action for e in await queue.events(pending.id)] == ["submit", "admit"]
    assert (await queue.verify()).ok


# --- leases and timeouts ---------------------------------------------------------------------


async def test_heartbeat_extends_the_lease(queue: AsyncQueue, clock: ManualClock) -> None:
    task = await claimed_task(queue)  # bugfix: 120 s per attempt
    assert task.lease_expires_at == clock.now() + timedelta(seconds=LEASE_TTL)
    clock.advance(20)
    reply = await queue.heartbeat([task])
    assert reply.held == frozenset({task.id}) and not reply.lost
    after = await queue.get(task.id)
    assert after.heartbeat_at == clock.now()
    assert after.lease_expires_at == clock.now() + timedelta(seconds=LEASE_TTL)
    clock.advance(LEASE_TTL - 1)  # past the first lease, within the extended one
    assert await queue.reclaim_lapsed() == []
    assert (await queue.get(task.id)).state is TaskState.EXECUTING
    clock.advance(1)
    assert [t.id for t in await queue.reclaim_lapsed()] == [task.id]


async def test_heartbeats_never_extend_a_lease_past_the_attempt_deadline_and_its_grace(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    # The grace leaves a live executor time to stop a timed-out attempt and report it itself.
    task = await claimed_task(queue, task_type="docs")  # 60 s per attempt
    assert task.locked_at is not None
    deadline = task.locked_at + timedelta(seconds=60 + GRACE)
    for _ in range(6):  # from 50 s on, the lease is cut at the deadline plus the grace
        clock.advance(10)
        assert (await queue.heartbeat([task])).held == frozenset({task.id})
        lease = (await queue.get(task.id)).lease_expires_at
        assert lease == min(clock.now() + timedelta(seconds=LEASE_TTL), deadline)
    clock.set(deadline - timedelta(seconds=1))
    assert await queue.reclaim_lapsed() == []
    clock.set(deadline)
    [back] = await queue.reclaim_lapsed()
    assert back.state is TaskState.RETRYING
    assert back.error is not None and "timed out" in back.error
    events = await queue.events(task.id)
    assert events[-1].action == "lease_expired" and "timed out" in events[-1].reason


async def test_attempt_past_its_timeout_is_taken_back_even_while_heartbeating(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue, task_type="docs", timeout_secs=45)
    for _ in range(4):
        clock.advance(15)
        await queue.heartbeat([task])
    # At 60 s: heartbeats came every 15 s, but the attempt deadline was 45 s.
    [back] = await queue.reclaim_lapsed()
    assert back.id == task.id and back.state is TaskState.RETRYING
    assert back.error == "attempt timed out after 45s"
    with pytest.raises(LeaseLost):
        await queue.complete(task.id, task.lock_token)


async def test_lease_of_a_short_task_is_no_longer_than_its_timeout_and_grace(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue, timeout_secs=5)
    assert task.lease_expires_at == clock.now() + timedelta(seconds=5 + GRACE)


# --- retries and dead letters ----------------------------------------------------------------


async def test_retrying_task_returns_to_pending_only_after_its_backoff(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue)
    failed = await queue.fail(task.id, task.lock_token, "connection reset")
    assert failed.state is TaskState.RETRYING and failed.retry_count == 1
    assert failed.run_after is not None
    backoff = (failed.run_after - clock.now()).total_seconds()
    assert 1.8 <= backoff <= 2.2  # 2 ** 1 seconds, +/- 10 % jitter
    assert await queue.promote_due_retries() == []
    assert await queue.admit() == [] and await queue.claim(1, "worker-1") == []
    clock.set(failed.run_after - timedelta(microseconds=1))
    assert await queue.promote_due_retries() == []
    clock.set(failed.run_after)
    [promoted] = await queue.promote_due_retries()
    assert promoted.state is TaskState.PENDING and promoted.eligible_at == clock.now()
    [admitted] = await queue.admit()
    assert admitted.id == task.id
    [again] = await queue.claim(1, "worker-1")
    assert again.retry_count == 1


async def test_backoff_grows_with_each_retry(queue: AsyncQueue, clock: ManualClock) -> None:
    task = await claimed_task(queue, max_retries=5)
    delays = []
    for _ in range(4):
        assert task.lock_token is not None
        failed = await queue.fail(task.id, task.lock_token, "flaky")
        assert failed.run_after is not None
        delays.append((failed.run_after - clock.now()).total_seconds())
        await back_in_queue(queue, clock, task.id)
        [task] = await queue.claim(1, "worker-1")
    # 2, 4, 8, 16 seconds, each +/- 10 %.
    for delay, base in zip(delays, [2, 4, 8, 16], strict=True):
        assert base * 0.9 <= delay <= base * 1.1


async def test_retries_exhausted_go_to_dead_letter(queue: AsyncQueue, clock: ManualClock) -> None:
    task = await claimed_task(queue, max_retries=2)
    for attempt in (1, 2):
        failed = await queue.fail(task.id, task.lock_token, f"flaky {attempt}")
        assert failed.state is TaskState.RETRYING and failed.retry_count == attempt
        await back_in_queue(queue, clock, task.id)
        [task] = await queue.claim(1, "worker-1")
    dead = await queue.fail(task.id, task.lock_token, "flaky 3")
    assert dead.state is TaskState.DEAD_LETTER and dead.retry_count == 2
    assert dead.error == "flaky 3" and dead.lock_token is None
    assert dead.state_reason is not None and "retries exhausted" in dead.state_reason
    assert [t.id for t in (await queue.dead_letters()).items] == [task.id]


async def test_lapsed_lease_with_no_retries_left_goes_to_dead_letter(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue, max_retries=0)
    [back] = await take_back(queue, clock)
    assert back.id == task.id and back.state is TaskState.DEAD_LETTER
    assert await queue.promote_due_retries() == []


async def test_non_retryable_failure_is_terminal(queue: AsyncQueue) -> None:
    task = await claimed_task(queue)
    failed = await queue.fail(task.id, task.lock_token, "bad input", retryable=False)
    assert failed.state is TaskState.FAILED and failed.retry_count == 0
    assert failed.finished_at is not None


async def test_release_puts_the_task_back_without_counting_a_retry(queue: AsyncQueue) -> None:
    task = await claimed_task(queue)
    released = await queue.release(task.id, task.lock_token, "graceful shutdown")
    assert released.state is TaskState.QUEUED and released.retry_count == 0
    assert released.lock_token is None
    [again] = await queue.claim(1, "worker-2")
    assert again.id == task.id and again.lock_token != task.lock_token


async def dead_letter(queue: AsyncQueue, **fields: Any) -> Task:
    task = await claimed_task(queue, max_retries=0, **fields)
    dead = await queue.fail(task.id, task.lock_token, "gave up")
    assert dead.state is TaskState.DEAD_LETTER
    return dead


async def test_requeue_of_a_dead_letter_resets_retries_and_queues_it(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await claimed_task(queue, max_retries=1)
    await queue.fail(task.id, task.lock_token, "flaky")
    await back_in_queue(queue, clock, task.id)
    [task] = await queue.claim(1, "worker-1")
    dead = await queue.fail(task.id, task.lock_token, "flaky again")
    assert dead.state is TaskState.DEAD_LETTER and dead.retry_count == 1

    requeued = await queue.requeue(task.id, actor="operator-7", reason="provider is back")
    assert requeued.state is TaskState.QUEUED and requeued.retry_count == 0
    assert requeued.error is None and requeued.run_after is None
    event = (await queue.events(task.id))[-1]
    assert (event.action, event.actor, event.reason) == (
        "requeue",
        "operator-7",
        "provider is back",
    )
    assert event.data == {"previous_retry_count": 1}
    [again] = await queue.claim(1, "worker-1")
    assert again.id == task.id
    # A fresh set of retries.
    assert (await queue.fail(again.id, again.lock_token, "x")).state is TaskState.RETRYING


async def test_review_then_requeue(queue: AsyncQueue) -> None:
    dead = await dead_letter(queue)
    reviewed = await queue.review(dead.id, actor="operator-7")
    assert reviewed.state is TaskState.MANUAL_REVIEW
    assert [t.id for t in (await queue.dead_letters()).items] == [dead.id]
    assert (await queue.requeue(dead.id)).state is TaskState.QUEUED
    assert (await queue.dead_letters()).items == []


@pytest.mark.parametrize("reviewed_first", [False, True])
async def test_archive_discards_a_dead_letter_for_good(
    queue: AsyncQueue, reviewed_first: bool
) -> None:
    dead = await dead_letter(queue)
    if reviewed_first:
        await queue.review(dead.id)
    archived = await queue.archive(dead.id, actor="operator-7", reason="obsolete")
    assert archived.state is TaskState.ARCHIVED and archived.finished_at is not None
    with pytest.raises(TransitionRefused):
        await queue.requeue(dead.id)
    with pytest.raises(TransitionRefused):
        await queue.cancel(dead.id)
    assert (await queue.dead_letters()).items == []


@pytest.mark.parametrize(
    ("setup", "action"),
    [
        ("pending", "review"),
        ("pending", "requeue"),
        ("pending", "archive"),
        ("queued", "review"),
        ("executing", "requeue"),
        ("executing", "archive"),
        ("completed", "review"),
        ("completed", "requeue"),
        ("completed", "archive"),
        ("completed", "cancel"),
        ("cancelled", "cancel"),
        ("manual_review", "review"),
    ],
)
async def test_people_actions_refused_in_the_wrong_state_change_nothing(
    queue: AsyncQueue, setup: str, action: str
) -> None:
    if setup == "pending":
        task = (await queue.submit(title="t", task_type="docs")).task
    elif setup == "queued":
        task = (await queue.submit(title="t", task_type="docs")).task
        await queue.admit()
    elif setup == "executing":
        task = await claimed_task(queue)
    elif setup == "completed":
        task = await claimed_task(queue)
        await queue.complete(task.id, task.lock_token)
    elif setup == "cancelled":
        task = (await queue.submit(title="t", task_type="docs")).task
        await queue.cancel(task.id)
    else:
        task = await dead_letter(queue)
        await queue.review(task.id)
    before = await queue.get(task.id)
    assert before.state.value == setup
    with pytest.raises(TransitionRefused) as refused:
        await getattr(queue, action)(task.id, actor="operator-7")
    assert not isinstance(refused.value, LeaseLost)
    assert setup in str(refused.value)
    assert await queue.get(task.id) == before
    assert await event_count(queue, task.id) == before.event_seq


async def test_cancel_records_actor_and_reason_in_the_events(queue: AsyncQueue) -> None:
    task = (await queue.submit(title="t", task_type="docs")).task
    cancelled = await queue.cancel(task.id, actor="operator-7", reason="duplicate of #12")
    assert cancelled.state is TaskState.CANCELLED and cancelled.finished_at is not None
    event = (await queue.events(task.id))[-1]
    assert (event.from_state, event.to_state) == (TaskState.PENDING, TaskState.CANCELLED)
    assert (event.action, event.actor, event.reason) == ("cancel", "operator-7", "duplicate of #12")


async def test_cancel_without_actor_records_the_queue_actor(
    queue: AsyncQueue, open_queue: Any
) -> None:
    task = (await queue.submit(title="t", task_type="docs")).task
    async with open_queue(actor="dashboard") as dashboard:
        await dashboard.cancel(task.id)
    event = (await queue.events(task.id))[-1]
    assert event.actor == "dashboard" and "dashboard" in event.reason


@pytest.mark.parametrize("state", ["pending", "queued", "executing", "retrying", "dead_letter"])
async def test_every_live_state_can_be_cancelled(
    queue: AsyncQueue, clock: ManualClock, state: str
) -> None:
    if state in ("pending", "queued"):
        task = (await queue.submit(title="t", task_type="docs")).task
        if state == "queued":
            await queue.admit()
    elif state == "executing":
        task = await claimed_task(queue)
    elif state == "retrying":
        task = await claimed_task(queue)
        await take_back(queue, clock)
    else:
        task = await dead_letter(queue)
    assert (await queue.get(task.id)).state.value == state
    cancelled = await queue.cancel(task.id, actor="operator-7", reason="not needed")
    assert cancelled.state is TaskState.CANCELLED
    assert await queue.promote_due_retries() == [] and await queue.admit() == []
    assert await queue.claim(5, "worker-1") == []
    assert (await queue.verify()).ok
