"""News of routed work wakes only the executors that can take it (PostgreSQL, whose notices say
whose work was queued): a worker with agents configured, draining tasks routed to no agent (its
handlers'), sends its agents' executors no claim after their first look at the queue. Each such
claim comes back empty after a walk over every queued task of other types: with six agents it
was six claims of nothing for every admission (benchmarks/statement_log.py counts them).
"""

from __future__ import annotations

import asyncio
import functools
import shutil
from collections import Counter
from typing import Any

import pytest
from worker_helpers import wait_for

from agentqueue import AsyncQueue, Task, TaskContext, TaskState
from agentqueue.config import Settings
from agentqueue.domain.states import Action
from agentqueue.store.base import ClaimParams
from agentqueue.store.tx import SQLTx

pytestmark = pytest.mark.postgres

AGENTS = ("a1", "a2")
ROUTED = Settings(
    agents={
        name: {"command": ["true"], "task_types": [f"t_{name}"], "isolation": "none"}
        for name in AGENTS
    },
    worker={"concurrency": 50},
)
ROUNDS = 5
PER_ROUND = 120  # more than the worker's slots: each admission leaves some queued


def _completed(counts: dict[TaskState, int], n: int) -> bool:
    return counts.get(TaskState.COMPLETED, 0) == n


async def test_news_of_work_for_the_handlers_sends_the_agents_executors_no_claim(
    pg_url: str,
) -> None:
    queue = AsyncQueue(pg_url, settings=ROUTED)

    @queue.handler("noop")
    async def noop(task: Task, ctx: TaskContext) -> None:
        return None

    await queue.open()
    claims: Counter[tuple[str, ...]] = Counter()
    real = queue.store.claim

    async def counted(p: ClaimParams) -> Any:
        claims[tuple(p.task_types or ())] += 1
        return await real(p)

    queue.store.claim = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run_worker(stop=stop, worker_id="routed"))
    try:
        for turn in range(ROUNDS):
            specs = [{"title": f"t{turn}-{i}", "task_type": "noop"} for i in range(PER_ROUND)]
            await queue.submit_many(specs)
            done = (turn + 1) * PER_ROUND
            await wait_for(queue, functools.partial(_completed, n=done), 60, "drained")
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await queue.close()
    # Every task went through the planner and ran in the handlers (the hand-over's claims go
    # inside the admission, the rest through the claimer).
    assert claims[("noop",)] >= 1, claims
    # Each agent's executor looked once as the worker started (knowing nothing of the queue),
    # perhaps once more from the safety poll; never once per admission.
    for name in AGENTS:
        assert claims[(f"t_{name}",)] <= 2, claims


async def test_a_task_handed_over_in_its_admission_costs_the_claimer_no_claim(
    pg_url: str,
) -> None:
    """With agents configured each task waits in pending until the worker's scheduler admits
    it, and claims it in the same transaction for this worker (the hand-over). One at a time,
    each is taken there: the claimer sends no claim of its own for it (one would find nothing
    and wake the scheduler for an admission pass that finds nothing too)."""
    queue = AsyncQueue(pg_url, settings=ROUTED)
    began: list[str] = []

    @queue.handler("noop")
    async def noop(task: Task, ctx: TaskContext) -> None:
        began.append(task.title)

    await queue.open()
    claims: Counter[tuple[str, ...]] = Counter()
    real = queue.store.claim

    async def counted(p: ClaimParams) -> Any:
        claims[tuple(p.task_types or ())] += 1
        return await real(p)

    queue.store.claim = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run_worker(stop=stop, worker_id="routed"))
    try:
        for i in range(6):
            if i == 1:
                await asyncio.sleep(1.5)  # the start-up's claims and the first poll are over
                claims.clear()
            made = await queue.submit(title=f"t{i}", task_type="noop")
            await wait_for(queue, functools.partial(_completed, n=i + 1), 60, "completed")
            # Handed over: admitted and claimed in one transaction (both events at its time).
            events = {e.action: e for e in await queue.events(made.task.id)}
            assert events[Action.CLAIM].at == events[Action.ADMIT].at
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await queue.close()
    assert began == [f"t{i}" for i in range(6)]
    assert claims[("noop",)] == 0, claims


async def test_a_completion_after_a_pass_that_left_nothing_waiting_runs_no_pass(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each completion announces itself to the scheduler (room freed under the caps). After a
    pass that admitted everything pending, it has nothing to let through: tasks coming one at
    a time, each is admitted once (its own notice's pass), with no admission pass of nothing
    after its completion."""
    queue = AsyncQueue(pg_url, settings=ROUTED)

    @queue.handler("noop")
    async def noop(task: Task, ctx: TaskContext) -> None:
        return None

    admissions: list[str] = []
    real = SQLTx.lock_admission

    async def counted(self: SQLTx, relaxed: bool = True) -> None:
        admissions.append("pass")
        await real(self, relaxed)

    monkeypatch.setattr(SQLTx, "lock_admission", counted)
    await queue.open()
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run_worker(stop=stop, worker_id="routed"))
    try:
        for i in range(6):
            if i == 1:
                admissions.clear()
            await queue.submit(title=f"t{i}", task_type="noop")
            await wait_for(queue, functools.partial(_completed, n=i + 1), 60, "completed")
            await asyncio.sleep(0.2)  # its completion's notice has come
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await queue.close()
    assert len(admissions) == 5, admissions


async def test_tasks_waiting_behind_an_agents_cap_are_admitted_as_completions_free_room(
    pg_url: str, tmp_path: Any
) -> None:
    """An agent that runs one task at a time, four tasks for it submitted together: each
    completion lets the next one through at once. The scheduler's tick is 30 s here, so only
    the completions' notices can: each pass leaves the rest waiting, and hears the next
    completion."""
    capped = Settings(
        agents={
            "one": {
                "command": [shutil.which("true") or "/bin/true"],
                "task_types": ["t_one"],
                "isolation": "none",
                "max_concurrent": 1,
            }
        },
        scheduler={"tick_secs": 30},
        worker={"concurrency": 10},
    )
    queue = AsyncQueue(pg_url, settings=capped)
    await queue.open()
    stop = asyncio.Event()
    running = asyncio.create_task(queue.run_worker(stop=stop, worker_id="capped"))
    try:
        await asyncio.sleep(0.5)  # the worker leads and has looked once
        await queue.submit_many([{"title": f"t{i}", "task_type": "t_one"} for i in range(4)])
        await wait_for(queue, functools.partial(_completed, n=4), 20, "all four completed")
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await queue.close()
