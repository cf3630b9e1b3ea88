"""News of routed work wakes only the executors that can take it (PostgreSQL, whose notices say
whose work was queued): a worker with agents configured, draining tasks routed to no agent (its
handlers'), sends its agents' executors no claim after their first look at the queue. Each such
claim comes back empty after a walk over every queued task of other types: with six agents it
was six claims of nothing for every admission (benchmarks/statement_log.py counts them).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from typing import Any

import pytest
from worker_helpers import wait_for

from agentqueue import AsyncQueue, Task, TaskContext, TaskState
from agentqueue.config import Settings
from agentqueue.domain.states import Action
from agentqueue.store.base import ClaimParams

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
