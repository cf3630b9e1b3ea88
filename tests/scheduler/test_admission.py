"""Admission (R4, R12) on each backend, driven step by step on the manual clock: aging and the
P0 lane, the global and per-agent caps (retries included), a named rate limit, fair share
between tenants, and pausing a task type."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from scheduler_helpers import OpenQueue, agent

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.config import load_settings
from agentqueue.domain.errors import ConfigError, InvalidInput
from agentqueue.domain.states import Action
from agentqueue.scheduler.steps import tick
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.store.base import Tx, WorkHints

S = TaskState


async def complete_all(queue: AsyncQueue, tasks: list[Task]) -> None:
    """Complete claimed tasks in one batch."""
    assert all(t.lock_token for t in tasks)
    await queue.finish(
        [Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED) for t in tasks]  # type: ignore[arg-type]
    )


PLANNED: dict[str, object] = {
    "admission": {"max_active": 10},
    "task_types": {"docs": {"rate_limit": "docs"}},
    "rate_limits": {"docs": {"per_minute": 6000, "burst": 1000}},
}
"""A cap and a rate limit: admission runs the planner (a global cap alone leaves it to the
claims)."""


async def admitted_titles(queue: AsyncQueue) -> list[str]:
    return [t.title for t in await queue.admit()]


async def test_aged_p5_is_admitted_like_p2_and_the_p0_lane_still_goes_first(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    """Under a global cap alone the claims admit (Settings.claims_admit), in admission order."""
    queue = await open_queue(admission={"max_active": 1})
    await queue.submit(title="old P5", task_type="docs", priority=5)
    clock.advance(minutes=30)  # 30 minutes at the default 10-minute aging interval: 5 -> 2
    await queue.submit(title="new P2", task_type="docs", priority=2)
    await queue.submit(title="new P3", task_type="docs", priority=3)
    await queue.submit(title="P0", task_type="docs", priority=0, idempotency_key="k0")
    order = []
    for _ in range(4):
        [claimed] = await queue.claim(2, "w")  # the cap of one leaves room for one
        order.append(claimed.title)
        await queue.complete(claimed.id, claimed.lock_token)
    # P0 first; then the aged P5 ranks like P2 and, having waited longer, goes before it.
    assert order == ["P0", "old P5", "new P2", "new P3"]


async def test_the_global_cap_counts_what_claims_took(open_queue: OpenQueue) -> None:
    """Under a global cap alone the scheduler leaves one tenant's pending tasks to the claims,
    which admit them, each up to what the cap leaves beside the executing ones."""
    queue = await open_queue(admission={"max_active": 3})
    await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(10)])
    assert await queue.admit() == []  # one tenant waits: the claims admit
    claimed = await queue.claim(2, "w")
    assert len(claimed) == 2
    for task in claimed:
        actions = [(e.action, e.actor) for e in await queue.events(task.id)]
        assert actions[1:] == [(Action.ADMIT, "w"), (Action.CLAIM, "w")]
    assert len(await queue.claim(5, "w")) == 1  # the room left
    assert await queue.claim(5, "w") == []  # three executing: the cap is reached
    await queue.complete(claimed[0].id, claimed[0].lock_token)
    assert len(await queue.claim(5, "w")) == 1
    counts = (await queue.stats()).by_state
    assert (counts[S.EXECUTING], counts[S.COMPLETED], counts[S.PENDING]) == (3, 1, 6)


async def test_under_a_cap_alone_the_scheduler_admits_while_several_tenants_wait(
    open_queue: OpenQueue,
) -> None:
    """With fair share, several tenants waiting are weighed by the planner: the scheduler
    admits their tasks (its queued ones count toward the cap), and the claims take only those
    while several tenants wait, admitting nothing themselves."""
    queue = await open_queue(admission={"max_active": 4})
    await queue.submit_many(
        [{"title": f"a{i}", "task_type": "docs", "tenant": "a"} for i in range(3)]
    )
    await queue.submit_many(
        [{"title": f"b{i}", "task_type": "docs", "tenant": "b"} for i in range(3)]
    )
    admitted = await queue.admit()
    assert sorted(t.tenant for t in admitted) == ["a", "a", "b", "b"]
    claimed = await queue.claim(10, "w")
    assert {t.id for t in claimed} == {t.id for t in admitted}
    assert await queue.claim(10, "w") == []
    assert await queue.admit() == []  # the cap is full


async def test_agent_cap_counts_a_retried_task_like_a_new_one(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(
        agents={"fixer": agent(["bugfix"], 2)}, retry={"base": 1.0, "cap_secs": 1, "jitter": 0}
    )
    await queue.submit_many([{"title": f"b{i}", "task_type": "bugfix"} for i in range(4)])
    await queue.submit(title="docs are free", task_type="docs")
    first = await queue.admit()
    assert sorted(t.title for t in first) == ["b0", "b1", "docs are free"]
    claimed = {t.title: t for t in await queue.claim(3, "w")}
    # b0 fails and will retry; while it waits in retrying it holds no slot, so b2 goes in.
    await queue.fail(claimed["b0"].id, claimed["b0"].lock_token, "flaky", retryable=True)
    assert [t.title for t in await queue.admit()] == ["b2"]
    clock.advance(seconds=5)
    retried = await queue.promote_due_retries()
    assert [t.title for t in retried] == ["b0"]
    # Back in pending, the retry waits for a slot like any new task: the agent has 2 admitted.
    assert await queue.admit() == []
    await queue.complete(claimed["b1"].id, claimed["b1"].lock_token)
    # A retry ages from when its backoff ended, so b3 (waiting since submit) goes first.
    assert [t.title for t in await queue.admit()] == ["b3"]
    await queue.complete(claimed["docs are free"].id, claimed["docs are free"].lock_token)
    assert await queue.admit() == []  # the free slot is not the agent's
    active = await queue.list(state=[S.QUEUED, S.EXECUTING], task_type=["bugfix"])
    assert len(active.items) == 2


async def test_an_explicit_assignee_counts_against_that_agents_cap(open_queue: OpenQueue) -> None:
    queue = await open_queue(agents={"a": agent(["review"], 1), "b": agent(["docs", "review"], 1)})
    await queue.submit(title="for b", task_type="review", assignee="b")
    await queue.submit(title="docs", task_type="docs")
    await queue.submit(title="review", task_type="review")
    # "for b" takes b's one slot, so the docs task (b's type) waits; "review" goes to a.
    assert sorted(await admitted_titles(queue)) == ["for b", "review"]


async def test_ten_per_minute_admits_thirty_tasks_never_more_than_ten_in_any_minute(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    queue = await open_queue(
        rate_limits={"llm": {"per_minute": 10}}, task_types={"review": {"rate_limit": "llm"}}
    )
    start = clock.now()
    await queue.submit_many([{"title": f"r{i}", "task_type": "review"} for i in range(30)])
    times = []
    for _second in range(240):
        for _ in await queue.admit():
            times.append((clock.now() - start).total_seconds())
        clock.advance(seconds=1)
    assert len(times) == 30
    for t0 in range(0, 240):
        in_window = [t for t in times if t0 <= t < t0 + 60]
        assert len(in_window) <= 10, f"{len(in_window)} admitted in the minute from {t0}s"
    assert times[-1] <= 180  # and none held back longer than the rate requires


async def test_a_rate_limit_is_shared_by_every_scheduler(
    open_queue: OpenQueue, clock: ManualClock
) -> None:
    conf = {
        "rate_limits": {"llm": {"per_minute": 6, "burst": 2}},
        "agents": {"writer": agent(["docs"], 100, rate_limit="llm")},
    }
    one, two = await open_queue(**conf), await open_queue(**conf)
    await one.submit_many([{"title": f"d{i}", "task_type": "docs"} for i in range(10)])
    assert len(await one.admit()) == 2  # the burst
    assert await two.admit() == []  # the same bucket, seen from another process
    clock.advance(seconds=10)  # one token a 10 s
    assert len(await two.admit()) + len(await one.admit()) == 1


async def test_a_small_tenant_is_not_starved_by_a_large_backlog(open_queue: OpenQueue) -> None:
    queue = await open_queue(admission={"max_active": 4})
    await queue.submit_many(
        [{"title": f"a{i}", "task_type": "docs", "tenant": "a"} for i in range(1000)]
    )
    await queue.submit_many(
        [{"title": f"b{i}", "task_type": "docs", "tenant": "b"} for i in range(10)]
    )
    started: list[Task] = []
    while len([t for t in started if t.tenant == "a"]) < 100:
        await queue.admit()
        claimed = await queue.claim(10, "w")
        assert claimed, "admission stalled"
        started.extend(claimed)
        await complete_all(queue, claimed)
    a_100th = [i for i, t in enumerate(started) if t.tenant == "a"][99]
    b_positions = [i for i, t in enumerate(started) if t.tenant == "b"]
    assert len(b_positions) == 10 and max(b_positions) < a_100th


async def test_tenant_weights_share_admissions_in_proportion(open_queue: OpenQueue) -> None:
    queue = await open_queue(admission={"max_active": 30, "tenant_weights": {"big": 2}})
    for tenant in ("big", "small"):
        await queue.submit_many(
            [{"title": f"{tenant}{i}", "task_type": "docs", "tenant": tenant} for i in range(50)]
        )
    admitted = await queue.admit()
    assert len(admitted) == 30
    assert sum(t.tenant == "big" for t in admitted) == 20


async def test_priority_beats_fair_share(open_queue: OpenQueue) -> None:
    queue = await open_queue(admission={"max_active": 2})
    await queue.submit_many(
        [{"title": f"a{i}", "task_type": "docs", "tenant": "a", "priority": 2} for i in range(3)]
    )
    await queue.submit(title="b", task_type="docs", tenant="b", priority=5)
    assert await admitted_titles(queue) == ["a0", "a1"]


@pytest.mark.parametrize("limits", [False, True], ids=["unlimited", "limited"])
async def test_a_paused_type_is_neither_admitted_nor_claimed_until_resumed(
    open_queue: OpenQueue, limits: bool
) -> None:
    queue = await open_queue(admission={"max_active": 100} if limits else {})
    early = await queue.submit(title="queued before the pause", task_type="deploy")
    assert early.task.state is (S.PENDING if limits else S.QUEUED)
    if limits:
        await queue.admit()
    await queue.pause("deploy", actor="oncall", reason="incident 42")
    late = await queue.submit(title="during the pause", task_type="deploy")
    other = await queue.submit(title="other work", task_type="docs")
    assert late.task.state is S.PENDING  # not admitted as it was submitted
    await queue.admit()
    claimed = await queue.claim(10, "w")
    assert [t.id for t in claimed] == [other.task.id]
    [paused] = await queue.paused()
    assert (paused.task_type, paused.paused_by, paused.reason) == (
        "deploy",
        "oncall",
        "incident 42",
    )
    assert await queue.resume("deploy", actor="oncall")
    assert not await queue.resume("deploy", actor="oncall")
    await queue.admit()
    claimed = await queue.claim(10, "w")
    assert {t.id for t in claimed} == {early.task.id, late.task.id}


async def test_pause_refuses_a_bad_type_name(open_queue: OpenQueue) -> None:
    queue = await open_queue()
    with pytest.raises(InvalidInput) as caught:
        await queue.pause("not a type!", actor="oncall")
    assert caught.value.problems[0].field == "task_type"
    assert await queue.paused() == []


async def test_caps_hold_with_two_schedulers_admitting_at_once(open_queue: OpenQueue) -> None:
    import asyncio

    conf = {"admission": {"max_active": 5}, "agents": {"fixer": agent(["bugfix"], 3)}}
    one, two = await open_queue(**conf), await open_queue(**conf)
    await one.submit_many(
        [{"title": f"t{i}", "task_type": "bugfix" if i % 2 else "docs"} for i in range(40)]
    )
    for _ in range(5):
        await asyncio.gather(one.admit(), two.admit(), one.admit(), two.admit())
        active = (await one.list(state=[S.QUEUED, S.EXECUTING], limit=100)).items
        assert len(active) <= 5
        assert sum(t.task_type == "bugfix" for t in active) <= 3
        claimed = await one.claim(2, "w")
        await complete_all(one, claimed)


def test_unknown_rate_limit_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "agentqueue.toml"
    path.write_text('[task_types.review]\nrate_limit = "nope"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "task_types.review.rate_limit" in str(caught.value)


@pytest.mark.parametrize("limited", [False, True], ids=["set-wise", "planned"])
async def test_a_pass_tells_of_each_admission_once_and_of_none_when_it_admits_nothing(
    open_queue: OpenQueue, limited: bool
) -> None:
    """A scheduler pass calls ``on_admitted`` (in a worker: its claimer, in the same process)
    once for an admission it made, the tasks then queued, and not at all when it admits
    nothing; both ways of admitting (set-wise, and planned under a cap and a rate limit)."""
    from agentqueue.scheduler.steps import tick

    settings: dict[str, object] = {"queue": {"admit_on_submit": False}}
    if limited:
        settings.update(PLANNED)
    queue = await open_queue(**settings)
    await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(3)])
    rt = await queue.runtime()
    calls: list[int] = []

    report = await tick(rt, admit_first=True, on_admitted=lambda: calls.append(1))
    assert report.admitted == 3 and calls == [1]
    assert (await queue.stats()).by_state[S.QUEUED] == 3
    report = await tick(rt, admit_first=True, on_admitted=lambda: calls.append(1))
    assert report.admitted == 0 and calls == [1]


async def test_the_attempts_an_admission_claims_for_run_before_the_rest_of_its_pass(
    open_queue: OpenQueue,
) -> None:
    """A pass woken by news of pending work lets the attempts its admission's claims started
    take the event loop before it goes on (the next read of the pass is not on their dispatch
    path)."""
    queue = await open_queue(**PLANNED)
    await queue.submit(title="t", task_type="docs")
    rt = await queue.runtime()
    order: list[str] = []

    async def attempt() -> None:
        order.append("attempt")

    async def hand_over(
        tx: Tx, now: datetime, agents: frozenset[str | None]
    ) -> Callable[[bool], None]:
        return lambda committed: started.append(asyncio.ensure_future(attempt()))

    started: list[asyncio.Future[None]] = []
    hints = rt.store.work_hints

    async def work_hints(now: datetime) -> WorkHints:
        order.append("the pass's next read")
        return await hints(now)

    rt.store.work_hints = work_hints  # type: ignore[method-assign]
    report = await tick(rt, admit_first=True, hand_over=hand_over)
    assert report.admitted == 1
    assert order[:2] == ["attempt", "the pass's next read"]
