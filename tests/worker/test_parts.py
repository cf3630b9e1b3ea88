"""The worker's parts one at a time: the supervision helper, the outcome flusher, the lease
keeper and its guard, the claimer, notice routing, tool runs and preemption. Database work goes
to the real store; a passing outage is made by a step that raises StoreUnavailable before
handing over to the real operation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID, uuid4

import pytest

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.domain.errors import LoopFailed, StoreError, StoreUnavailable
from agentqueue.domain.models import LogRecord
from agentqueue.domain.states import Refusal
from agentqueue.executors.base import AttemptControl, AttemptResult
from agentqueue.service.execution import HeartbeatReply, Outcome, OutcomeKind
from agentqueue.service.execution import claim_in as claim_in_tx
from agentqueue.service.tools import ToolWork
from agentqueue.store.base import (
    CHANNEL_CHANGED,
    CHANNEL_PENDING,
    CHANNEL_QUEUED,
    CHANNEL_REVOKED,
    CHANNEL_TOOLS,
    Later,
    Notice,
)
from agentqueue.supervise import Outage, Supervisor, cancel_requested
from agentqueue.worker.claimer import Claimer
from agentqueue.worker.flusher import OutcomeFlusher
from agentqueue.worker.lease_keeper import LEASE_GUARD, LeaseKeeper
from agentqueue.worker.notices import NoticeRouter, Wakeups
from agentqueue.worker.preemption import Preemptor
from agentqueue.worker.running import Running
from agentqueue.worker.tools import ToolRunner

T = TypeVar("T")
log = logging.getLogger("agentqueue.test")
DOWN = StoreUnavailable("PostgreSQL is unavailable: terminating connection")


def failing_first(times: int, action: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``action``, after raising StoreUnavailable ``times`` times (the database away)."""
    left = [times]

    async def call(*args: Any, **kwargs: Any) -> T:
        if left[0] > 0:
            left[0] -= 1
            raise DOWN
        return await action(*args, **kwargs)

    return call


@dataclass
class Slots:
    """An executor as the parts see it (they never run it)."""

    name: str = "handlers"
    task_types: frozenset[str] = frozenset({"bugfix"})
    agents: frozenset[str] = frozenset()
    max_concurrent: int = 2
    started: list[Task] = field(default_factory=list)

    async def run(self, task: Task, control: AttemptControl) -> AttemptResult:
        raise AssertionError("not run here")


def running(task: Task, executor: Any = None, renewed_at: float | None = None) -> Running:
    control = AttemptControl(deadline=time.monotonic() + 60)
    return Running(task, executor or Slots(), control, renewed_at or time.monotonic())


async def claimed(queue: AsyncQueue, n: int) -> list[Task]:
    await queue.submit_many([{"title": f"t{i}", "task_type": "bugfix"} for i in range(n)])
    await queue.admit()
    return await queue.claim(n, "w1")


# --- supervision ------------------------------------------------------------------------------


async def test_an_outage_is_logged_once_paced_and_its_end_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(log, first=0.2, longest=1.0)
    with caplog.at_level(logging.INFO, "agentqueue.test"):
        pauses = [outage.failed(DOWN, "recording 3 outcomes") for _ in range(5)]
        outage.ok()
        outage.ok()
    assert pauses == [0.2, 0.4, 0.8, 1.0, 1.0]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "database unavailable (PostgreSQL is unavailable: terminating connection); "
        "recording 3 outcomes again in 0.2 s"
    )
    assert len(lines) == 2 and lines[1].startswith("database reachable again after ")
    assert outage.failed(DOWN, "x") == 0.2  # a new outage starts from the first pause


async def test_a_job_that_dies_is_logged_with_its_traceback_and_fails_its_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    woken = asyncio.Event()
    jobs = Supervisor(log, on_failure=woken.set)

    async def broken() -> None:
        raise KeyError("oops")

    jobs.start(broken(), "agentqueue-broken")
    quiet = jobs.start(asyncio.sleep(60), "agentqueue-quiet")
    await asyncio.wait_for(woken.wait(), 5)
    assert jobs.failed.is_set()
    record = next(r for r in caplog.records if "agentqueue-broken died" in r.getMessage())
    assert record.levelno == logging.ERROR and record.exc_info is not None
    with pytest.raises(LoopFailed, match="agentqueue-broken died: KeyError"):
        jobs.check()
    await jobs.close()
    assert quiet.cancelled() and not jobs.jobs


async def test_close_ends_a_job_that_swallowed_its_first_cancel() -> None:
    jobs = Supervisor(log)
    rounds = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                rounds.append(cancel_requested())
                if len(rounds) > 1:
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]

    job = jobs.start(stubborn(), "agentqueue-stubborn")
    await asyncio.sleep(0)
    await asyncio.wait_for(jobs.close(), 5)
    assert job.cancelled() and len(rounds) == 2


# --- outcome flusher ----------------------------------------------------------------------------


async def test_outcomes_are_kept_through_an_outage_and_written_once_it_ends(
    queue: AsyncQueue,
) -> None:
    tasks = await claimed(queue, 3)

    async def finish(outcomes: list[Outcome], logs: list[Any]) -> dict[UUID, Task | Refusal]:
        return await queue.finish(outcomes, actor="w1", logs=logs)

    jobs = Supervisor(log)
    flusher = OutcomeFlusher(failing_first(2, finish), jobs, in_flight=2)
    loop = jobs.start(flusher.run(), "agentqueue-flush")
    for task in tasks:
        assert task.lock_token is not None
        flusher.add(Outcome(task.id, task.lock_token, OutcomeKind.COMPLETED, claimed=task))
    for _ in range(100):
        if flusher.written == 3:
            break
        await asyncio.sleep(0.05)
    await jobs.close({loop})
    await flusher.close(patience_secs=1)
    assert flusher.written == 3 and flusher.pending == 0
    assert {(await queue.get(t.id)).state for t in tasks} == {TaskState.COMPLETED}


async def test_an_outcome_sent_again_after_its_lease_moved_on_is_a_refusal(
    queue: AsyncQueue, caplog: pytest.LogCaptureFixture
) -> None:
    [task] = await claimed(queue, 1)
    assert task.lock_token is not None
    done = Outcome(task.id, task.lock_token, OutcomeKind.COMPLETED, claimed=task)
    stale = Outcome(task.id, uuid4(), OutcomeKind.FAILED, error="late", claimed=task)
    answer = await queue.finish([stale], actor="w1")
    assert isinstance(answer[task.id], Refusal)  # a stale token: refused, not raised
    assert isinstance((await queue.finish([done], actor="w1"))[task.id], Task)
    again = await queue.finish([done], actor="w1")
    assert isinstance(again[task.id], Refusal)  # sent twice: the second changes nothing
    assert (await queue.get(task.id)).state is TaskState.COMPLETED

    # The flusher writes both attempts of one task (claimed again before the first outcome was
    # written) in separate batches, and goes on past the refusal.
    async def finish(outcomes: list[Outcome], logs: list[Any]) -> dict[UUID, Task | Refusal]:
        assert len({o.task_id for o in outcomes}) == len(outcomes)
        return await queue.finish(outcomes, actor="w1", logs=logs)

    flusher = OutcomeFlusher(finish, Supervisor(log))
    flusher.add(stale)
    flusher.add(done)
    with caplog.at_level(logging.INFO, "agentqueue.worker"):
        await flusher.close(patience_secs=1)
    assert flusher.written == 2
    assert sum("not recorded" in r.getMessage() for r in caplog.records) == 2


async def test_at_shutdown_outcomes_are_given_up_only_after_the_patience(
    queue: AsyncQueue, caplog: pytest.LogCaptureFixture
) -> None:
    [task] = await claimed(queue, 1)
    assert task.lock_token is not None

    async def never(outcomes: list[Outcome], logs: list[Any]) -> dict[UUID, Task | Refusal]:
        raise DOWN

    flusher = OutcomeFlusher(never, Supervisor(log))
    flusher.add(Outcome(task.id, task.lock_token, OutcomeKind.COMPLETED, claimed=task))
    started = time.monotonic()
    await flusher.close(patience_secs=0.5)
    assert time.monotonic() - started >= 0.2  # it waited out its patience before giving up
    assert flusher.pending == 1
    assert any("giving up on 1 outcomes" in r.getMessage() for r in caplog.records)


async def test_an_outcome_no_write_can_take_is_dropped_alone_and_the_rest_recorded(
    queue: AsyncQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch that fails for a reason waiting cannot mend is written one outcome at a time:
    the others and the logs are recorded, the one that still fails is dropped with an error
    (its lease lapses and the scheduler retries it), and nothing is retried for ever."""
    tasks = await claimed(queue, 3)
    bad = tasks[1].id

    async def finish(outcomes: list[Outcome], logs: list[Any]) -> dict[UUID, Task | Refusal]:
        if any(o.task_id == bad for o in outcomes):
            raise StoreError("PostgreSQL: a value this database refuses")
        return await queue.finish(outcomes, actor="w1", logs=logs)

    flusher = OutcomeFlusher(finish, Supervisor(log))
    at = datetime.now(UTC)
    for task in tasks:
        assert task.lock_token is not None
        record = LogRecord(task.id, task.tenant, 1, "stdout", at, f"out {task.title}", False)
        outcome = Outcome(task.id, task.lock_token, OutcomeKind.COMPLETED, claimed=task)
        flusher.add(outcome, [record])
    with caplog.at_level(logging.INFO, "agentqueue.worker"):
        assert await flusher.write_once() == 0.0
    assert flusher.pending == 0 and flusher.written == 2
    states = {t.id: (await queue.get(t.id)).state for t in tasks}
    assert states == {
        tasks[0].id: TaskState.COMPLETED,
        bad: TaskState.EXECUTING,
        tasks[2].id: TaskState.COMPLETED,
    }
    assert [r.text for r in await queue.logs(tasks[2].id)] == [f"out {tasks[2].title}"]
    assert any(f"dropping the outcome for task {bad}" in r.getMessage() for r in caplog.records)


# --- lease keeper -----------------------------------------------------------------------------


async def test_heartbeats_renew_the_leases_of_running_attempts(queue: AsyncQueue) -> None:
    [task] = await claimed(queue, 1)
    attempt = running(task, renewed_at=time.monotonic() - 0.5)
    before = attempt.renewed_at
    keeper = LeaseKeeper(queue.heartbeat, {task.id: attempt}, interval_secs=0.05, lease_secs=1)
    job = asyncio.create_task(keeper.run())
    await asyncio.sleep(0.7)  # past the guard, had the heartbeats not held
    job.cancel()
    assert attempt.renewed_at > before and not attempt.control.cancel.is_set()
    assert keeper.guarded == 0


async def test_leases_of_outcomes_not_yet_recorded_are_renewed_too(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """An attempt that ended while its outcome waits to be written (the database away) keeps
    its lease: once the database is back the outcome is recorded, rather than the task taken
    back as lapsed and run again. A task claimed again meanwhile is renewed only as running,
    so the old token's refusal never stops the new attempt."""
    ended, again = await claimed(queue, 2)
    expires = (await queue.get(ended.id)).lease_expires_at
    assert expires is not None and again.lock_token is not None
    attempt = running(again)
    stale = again.evolve(lock_token=uuid4())  # an earlier attempt's outcome, still waiting
    sent: list[list[UUID]] = []

    async def heartbeat(tasks: list[Task]) -> HeartbeatReply:
        reply = await queue.heartbeat(tasks)
        sent.append([t.id for t in tasks])
        return reply

    keeper = LeaseKeeper(
        heartbeat,
        {again.id: attempt},
        interval_secs=0.05,
        lease_secs=30,
        pending=lambda: [ended, stale],
    )
    clock.advance(5)
    job = asyncio.create_task(keeper.run())
    for _ in range(200):
        if sent:
            break
        await asyncio.sleep(0.01)
    job.cancel()
    assert sent[0] == [again.id, ended.id]
    renewed = (await queue.get(ended.id)).lease_expires_at
    assert renewed is not None and renewed > expires
    assert not attempt.control.cancel.is_set()


@pytest.mark.parametrize("fault", ["refused", "hangs"])
async def test_heartbeats_failing_past_the_guard_stop_the_attempt_before_its_lease_lapses(
    queue: AsyncQueue, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    [task] = await claimed(queue, 1)
    attempt = running(task)

    async def heartbeat(tasks: list[Task]) -> Any:
        if fault == "hangs":
            await asyncio.sleep(60)
        raise DOWN

    keeper = LeaseKeeper(
        heartbeat, {task.id: attempt}, interval_secs=0.1, lease_secs=1.0, guard=0.5
    )
    job = asyncio.create_task(keeper.run())
    await asyncio.wait_for(attempt.control.cancel.wait(), 2)
    stopped_after = time.monotonic() - attempt.renewed_at
    job.cancel()
    assert 0.5 <= stopped_after < 0.9  # at the guard, before the lease (1 s) lapses
    assert attempt.control.cancel_reason == LEASE_GUARD
    assert keeper.guarded == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum(m.startswith("database unavailable") for m in warnings) == 1
    assert any("stopping 1 running attempt(s)" in m for m in warnings)


async def test_a_lost_lease_and_a_revocation_stop_their_attempts(queue: AsyncQueue) -> None:
    first, second = await claimed(queue, 2)
    await queue.cancel(first.id, reason="not needed")
    attempts = {t.id: running(t) for t in (first, second)}
    keeper = LeaseKeeper(queue.heartbeat, attempts, interval_secs=0.05, lease_secs=5)
    job = asyncio.create_task(keeper.run())
    await asyncio.wait_for(attempts[first.id].control.cancel.wait(), 2)
    job.cancel()
    assert attempts[first.id].control.cancel_reason == "cancelled"
    assert not attempts[second.id].control.cancel.is_set()
    keeper.revoke(f"{second.id},not-a-uuid")
    assert attempts[second.id].control.cancel.is_set()


# --- claimer ----------------------------------------------------------------------------------


async def test_the_claimer_stops_during_an_outage_and_claims_again_when_it_ends(
    queue: AsyncQueue,
) -> None:
    await queue.submit_many([{"title": f"t{i}", "task_type": "bugfix"} for i in range(3)])
    await queue.admit()
    executor = Slots(max_concurrent=5)
    started: list[Task] = []
    woken: list[str] = []

    async def claim(n: int, types: Any, agents: Any) -> list[Task]:
        return await queue.claim(n, "w1", types, agents)

    async def hints() -> Any:
        return await queue.store.work_hints(queue.clock.now())

    jobs = Supervisor(log)
    claimer = Claimer(
        failing_first(1, claim),
        failing_first(1, hints),
        [executor],
        {},
        lambda task, _executor, _sent: started.append(task),
        jobs,
        concurrency=5,
        batch=10,
        in_flight=1,
        on_dry=lambda: woken.append("scheduler"),
        on_claimed=lambda: woken.append("worker"),
    )
    claimer.fill()
    await jobs.wait_all(claimer.claiming)
    assert started == []
    claimer.fill()  # the executor waits for the poll
    assert not claimer.claiming
    for _ in range(3):  # the first poll fails too; a later one finds the queued work
        await asyncio.sleep(0.5)
        await claimer.poll()
    claimer.fill()
    await jobs.wait_all(claimer.claiming)
    assert len(started) == 3 and claimer.claimed == 3
    assert woken == ["scheduler", "worker"]  # came back short: the queue ran dry


@pytest.mark.parametrize("claims_admit", [False, True])
async def test_the_claimers_poll_counts_pending_work_only_when_claims_admit(
    queue: AsyncQueue, claims_admit: bool
) -> None:
    """An executor left alone after a short claim is woken by the poll when work is queued, and
    also, when claims admit (a global cap alone), when work is pending."""
    await queue.submit(title="t", task_type="bugfix")  # pending
    started: list[Task] = []
    claimer = claimer_on(
        queue, Slots(max_concurrent=5), started, batch=10, in_flight=1, claims_admit=claims_admit
    )
    claimer.fill()
    await claimer.jobs.wait_all(claimer.claiming)
    assert started == []  # nothing queued: the executor now waits for news
    await claimer.poll()
    claimer.fill()
    assert bool(claimer.claiming) is claims_admit


def claimer_on(
    queue: AsyncQueue,
    executor: Slots,
    started: list[Task],
    claim: Callable[[int, Any, Any], Awaitable[list[Task]]] | None = None,
    **options: Any,
) -> Claimer:
    """A claimer of one executor claiming from ``queue`` as worker w1 (or with ``claim``); the
    tasks it would start go to ``started``."""

    async def claim_w1(n: int, types: Any, agents: Any) -> list[Task]:
        return await queue.claim(n, "w1", types, agents)

    async def hints() -> Any:
        return await queue.store.work_hints(queue.clock.now())

    return Claimer(
        claim or claim_w1, hints, [executor], {}, lambda task, _e, _s: started.append(task),
        Supervisor(log),
        **{"concurrency": 100, "on_dry": lambda: None, "on_claimed": lambda: None, **options},
    )  # fmt: skip


async def claims_on_news(queue: AsyncQueue, claimer: Claimer) -> int:
    """Three more tasks queued and the news of them told: how many claims go out."""
    await queue.submit_many([{"title": f"n{i}", "task_type": "bugfix"} for i in range(3)])
    await queue.admit()
    claimer.work_arrived()
    claimer.fill()
    return len(claimer.claiming)


async def test_claims_go_out_one_at_a_time_until_one_comes_back_full(queue: AsyncQueue) -> None:
    """Knowing nothing of the queue, or after a claim came back short, the claimer sends one
    claim (a notice of one task is not four claims racing for it); once a claim comes back
    full it keeps ``in_flight`` claims under way again."""
    await queue.submit_many([{"title": f"t{i}", "task_type": "bugfix"} for i in range(9)])
    await queue.admit()
    started: list[Task] = []
    claimer = claimer_on(queue, Slots(max_concurrent=100), started, batch=2, in_flight=4)
    jobs = claimer.jobs
    claimer.fill()
    assert len(claimer.claiming) == 1  # nothing known yet
    await jobs.wait_all(claimer.claiming)
    assert len(started) == 2  # a full batch: claims in flight again
    claimer.fill()
    assert len(claimer.claiming) == 4
    await jobs.wait_all(claimer.claiming)
    assert len(started) == 9  # the last came back short (one of two)
    assert await claims_on_news(queue, claimer) == 1
    await jobs.wait_all(claimer.claiming)
    claimer.fill()
    assert len(claimer.claiming) == 4


async def test_a_full_claim_sent_before_a_short_one_came_back_keeps_the_probing(
    queue: AsyncQueue,
) -> None:
    """Claims in flight come back in any order. One that comes back full after another came
    back short was sent before that news: it does not end the probing (the next news of work
    gets one claim, not ``in_flight`` racing for it)."""
    await queue.submit_many([{"title": f"t{i}", "task_type": "bugfix"} for i in range(7)])
    await queue.admit()
    started: list[Task] = []
    full_may_return = asyncio.Event()
    all_back = asyncio.Event()
    back: list[int] = []

    async def claim(n: int, types: Any, agents: Any) -> list[Task]:
        tasks = await queue.claim(n, "w1", types, agents)
        if not full_may_return.is_set():
            back.append(len(tasks))
            if len(back) == 4:
                all_back.set()  # every short one has been taken in by now
            if len(tasks) == n:
                await full_may_return.wait()
        return tasks

    claimer = claimer_on(queue, Slots(max_concurrent=100), started, claim, batch=2, in_flight=4)
    jobs = claimer.jobs
    full_may_return.set()
    claimer.fill()
    await jobs.wait_all(claimer.claiming)
    assert len(started) == 2  # full: claims in flight again
    full_may_return.clear()
    claimer.fill()
    assert len(claimer.claiming) == 4  # 8 slots asked for 5 tasks: some come back short
    async with asyncio.timeout(30):
        await all_back.wait()
    assert 2 in back and min(back) < 2  # the full ones come back after a short one
    full_may_return.set()
    await jobs.wait_all(claimer.claiming)
    assert len(started) == 7
    assert await claims_on_news(queue, claimer) == 1
    await jobs.wait_all(claimer.claiming)


async def test_claims_within_an_admission_start_when_it_commits_and_hold_their_slots(
    queue: AsyncQueue,
) -> None:
    """Claimer.claim_within claims in the admission's transaction for the executors of what it
    admitted; until the transaction ends those slots stay held (fill claims nothing more), the
    tasks start only once it committed, and a rollback drops them and frees the slots."""
    await queue.submit_many([{"title": f"t{i}", "task_type": "bugfix"} for i in range(3)])
    await queue.admit()
    rt = await queue.runtime()
    started: list[Task] = []
    claimer = claimer_on(queue, Slots(max_concurrent=2), started, batch=10, in_flight=1)

    async def within(agents: frozenset[str | None], commit: bool) -> None:
        try:
            async with queue.store.transaction() as tx:

                async def claim_in(n: int, types: Any, of: Any) -> Later[list[Task]]:
                    return await claim_in_tx(tx, rt, n, "w1", types, of)

                end = await claimer.claim_within(claim_in, agents)
                claimer.fill()  # the slots are held: nothing more is claimed meanwhile
                assert not claimer.claiming and started == []
                if not commit:
                    raise LookupError
        except LookupError:
            end(False)
        else:
            end(True)

    async def never(n: int, types: Any, of: Any) -> Later[list[Task]]:
        raise AssertionError("claimed for an executor that runs nothing admitted")

    # Admitted to an agent no executor of this worker runs: nothing is claimed, nothing held.
    (await claimer.claim_within(never, frozenset({"fixer"})))(True)
    assert started == [] and claimer.claimed == 0
    await within(frozenset({None}), commit=False)
    assert started == [] and await queue.store.count_by_state() == {TaskState.QUEUED: 3}
    await within(frozenset({None}), commit=True)
    assert len(started) == 2 and claimer.claimed == 2
    counts = await queue.store.count_by_state()
    assert counts == {TaskState.QUEUED: 1, TaskState.EXECUTING: 2}


async def test_news_that_comes_while_a_claim_is_under_way_is_not_lost_when_it_comes_back_short(
    queue: AsyncQueue,
) -> None:
    """Work committed after a claim's snapshot may be announced before the claim's answer comes
    back: the claim comes back short, yet its executor claims again at once rather than wait
    for the poll."""
    started: list[Task] = []
    told = asyncio.Event()

    async def claim(n: int, types: Any, agents: Any) -> list[Task]:
        tasks = await queue.claim(n, "w1", types, agents)
        if not told.is_set():
            told.set()
            await queue.submit(title="late", task_type="bugfix")
            await queue.admit()
            claimer.work_arrived()  # its notice, heard before this answer came back
        return tasks

    claimer = claimer_on(queue, Slots(max_concurrent=5), started, claim, batch=10, in_flight=1)
    claimer.fill()
    await claimer.jobs.wait_all(claimer.claiming)
    assert started == [] and told.is_set()  # short: the queue was empty when it looked
    claimer.fill()
    assert len(claimer.claiming) == 1  # the news came meanwhile: no wait for the poll
    await claimer.jobs.wait_all(claimer.claiming)
    assert [t.title for t in started] == ["late"]
    claimer.fill()
    assert not claimer.claiming  # that one came back short with no news since: it waits


# --- notices, tools, preemption -----------------------------------------------------------------


async def test_notices_lead_to_their_wakeups(queue: AsyncQueue) -> None:
    calls: list[str] = []
    router = NoticeRouter(
        queue.store,
        lambda: queue.store.work_hints(queue.clock.now()),
        Wakeups(
            revoke=lambda payload: calls.append(f"revoke {payload}"),
            tools=lambda: calls.append("tools"),
            work=lambda: calls.append("work"),
            p0=lambda: calls.append("p0"),
            scheduler=lambda: calls.append("scheduler"),
        ),
        Supervisor(log),
    )
    for channel, payload in [(CHANNEL_REVOKED, "a,b"), (CHANNEL_TOOLS, ""),
                             (CHANNEL_QUEUED, "p0"), (CHANNEL_PENDING, "")]:  # fmt: skip
        router.route(Notice(channel, payload))
    assert calls == ["revoke a,b", "tools", "p0", "work", "scheduler"]
    calls.clear()
    await queue.submit(title="t", task_type="bugfix")
    await queue.admit()
    router.route(Notice(CHANNEL_CHANGED))  # a bare commit: one read says whether work waits
    await asyncio.wait_for(asyncio.gather(*router.jobs.jobs), 5)
    assert calls == ["tools", "scheduler", "work"]


def recording_router(
    queue: AsyncQueue, calls: list[Any], *, routed: bool = False, pending_is_work: bool = False
) -> NoticeRouter:
    """A notice router whose claimer, preemptor and scheduler wake-ups append to ``calls`` (a
    routed wake-up, with ``routed``, appends the agents it names)."""
    return NoticeRouter(
        queue.store,
        lambda: queue.store.work_hints(queue.clock.now()),
        Wakeups(
            revoke=lambda payload: None,
            tools=lambda: None,
            work=lambda: calls.append("work"),
            p0=lambda: calls.append("p0"),
            scheduler=lambda: calls.append("scheduler"),
            routed=calls.append if routed else None,
        ),
        Supervisor(log),
        pending_is_work=pending_is_work,
    )


async def test_news_of_routed_work_wakes_only_its_agents_executors(queue: AsyncQueue) -> None:
    """Queued news that names the agents its work was routed to ('*': to none) goes to the
    routed wake-up with those agents; any other queued news, or a worker without a routed
    wake-up, wakes every executor; 'p0' still wakes the preemptor too."""
    calls: list[Any] = []

    for payload in ("to:a1,*", "to:a2", "", "p0", "resumed"):
        recording_router(queue, calls, routed=True).route(Notice(CHANNEL_QUEUED, payload))
    assert calls == [{"a1", None}, {"a2"}, "work", "p0", "work", "work"]
    calls.clear()
    recording_router(queue, calls).route(Notice(CHANNEL_QUEUED, "to:a1"))
    assert calls == ["work"]


async def test_when_claims_admit_news_of_pending_work_wakes_the_claimer(queue: AsyncQueue) -> None:
    """Under a global cap alone (claims admit), new pending work is the claimer's news alone (a
    claim that comes back short wakes the scheduler), and a P0 task among it the preemptor's
    too; a completion or a resumed type, also announced as pending news, wakes the scheduler
    and the claimer; a bare commit finding only pending work claims (and may preempt)."""
    calls: list[Any] = []
    router = recording_router(queue, calls, pending_is_work=True)
    router.route(Notice(CHANNEL_PENDING, ""))
    assert calls == ["work"]
    calls.clear()
    router.route(Notice(CHANNEL_PENDING, "p0"))  # a P0 task pending: it may preempt
    assert calls == ["p0", "work"]
    calls.clear()
    for payload in ("completed", "resumed"):
        router.route(Notice(CHANNEL_PENDING, payload))
    assert calls == ["scheduler", "work", "scheduler", "work"]
    calls.clear()
    await queue.submit(title="t", task_type="bugfix", run_after=queue.clock.now())
    assert (await queue.store.count_by_state()).get(TaskState.QUEUED, 0) == 0
    router.route(Notice(CHANNEL_CHANGED))
    await asyncio.wait_for(asyncio.gather(*router.jobs.jobs), 5)
    assert calls == ["scheduler", "work", "p0"]


async def test_tool_runs_go_on_through_an_outage() -> None:
    work = ToolWork(uuid4(), "default", "call-1", "search", {"q": "x"})
    given = [[work]]
    answers: list[Any] = []

    async def take(names: list[str], room: int) -> list[ToolWork]:
        return given.pop() if given else []

    async def answer(task_id: UUID, call_id: str, value: Any) -> object:
        answers.append((task_id, call_id, value))
        return None

    jobs = Supervisor(log)
    runner = ToolRunner(
        {"search": lambda args: {"hits": [args["q"]]}},
        failing_first(1, take),
        failing_first(2, answer),
        jobs,
        concurrency=2,
        poll_secs=0.05,
    )
    loop = jobs.start(runner.run(), "agentqueue-tools")
    for _ in range(100):
        if answers:
            break
        await asyncio.sleep(0.05)
    await jobs.close({loop})
    await jobs.wait_all(runner.running)
    assert answers == [(work.task_id, "call-1", {"hits": ["x"]})] and runner.calls == 1


async def test_a_full_executor_yields_its_least_urgent_long_running_task(
    queue: AsyncQueue,
) -> None:
    now = queue.clock.now()
    executor = Slots(max_concurrent=2)
    first, second = await claimed(queue, 2)
    urgent = first.evolve(priority=2, started_at=now - timedelta(seconds=60))
    idle = second.evolve(priority=8, started_at=now - timedelta(seconds=10))
    attempts = {t.id: running(t, executor) for t in (urgent, idle)}

    async def queued_p0() -> list[tuple[str | None, str]]:
        return [(None, "bugfix")]

    preemptor = Preemptor([executor], attempts, queued_p0, queue.clock.now, Supervisor(log),
                          enabled=True, after_secs=3, min_priority=7)  # fmt: skip
    assert [r.task.id for r in preemptor.victims()] == [idle.id]
    assert preemptor.victims([(None, "docs")]) == []  # it could not run the P0 task
    preemptor.p0_queued()
    await asyncio.wait_for(asyncio.gather(*preemptor.jobs.jobs), 5)
    assert attempts[idle.id].control.yielding.is_set()
    assert preemptor.victims() == []  # already yielding


# --- the worker as a whole ----------------------------------------------------------------------


async def test_a_part_that_dies_stops_the_worker_with_loop_failed(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from agentqueue.config import Settings

    queue = AsyncQueue(db_url, settings=Settings(worker={"poll_secs": 0.1}))

    @queue.handler("bugfix")
    async def fix(task: Task, ctx: Any) -> None:
        await asyncio.sleep(60)

    await queue.submit(title="t", task_type="bugfix")
    worker = queue.worker(run_scheduler=True, grace_secs=5)

    async def broken() -> None:
        await asyncio.sleep(0.5)
        raise RuntimeError("a bug in the lease keeper")

    worker.lease_keeper.run = broken  # type: ignore[method-assign]
    with pytest.raises(LoopFailed, match="agentqueue-heartbeat died: RuntimeError"):
        await asyncio.wait_for(worker.run(), 20)
    assert any("a bug in the lease keeper" in r.getMessage() and r.exc_info
               for r in caplog.records)  # fmt: skip
    # The running attempt was stopped and handed back, not left behind.
    assert worker.running == 0
    await queue.close()
