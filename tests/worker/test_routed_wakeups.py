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
from worker_helpers import wait_for, worker_running

from agentqueue import AsyncQueue, Task, TaskContext, TaskState
from agentqueue.config import Settings
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
    async with worker_running(queue, worker_id="routed"):
        for turn in range(ROUNDS):
            specs = [{"title": f"t{turn}-{i}", "task_type": "noop"} for i in range(PER_ROUND)]
            await queue.submit_many(specs)
            done = (turn + 1) * PER_ROUND
            await wait_for(queue, functools.partial(_completed, n=done), 60, "drained")
    # Every task went through the planner and ran in the handlers (the hand-over's claims go
    # inside the admission, the rest through the claimer).
    assert claims[("noop",)] >= 1, claims
    # Each agent's executor looked once as the worker started (knowing nothing of the queue),
    # perhaps once more from the safety poll; never once per admission.
    for name in AGENTS:
        assert claims[(f"t_{name}",)] <= 2, claims


async def test_tasks_waiting_behind_an_agents_cap_are_admitted_as_completions_free_room(
    pg_url: str,
) -> None:
    """An agent that runs one task at a time, four tasks for it submitted together: each
    completion lets the next one through at once, not at the scheduler's next tick (30 s here).
    Two things wake the scheduler then: the completion's notice (room freed) and the agent's
    executor coming back short from its claim once its slot is free; either is enough, and
    without both this fails."""
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
    async with worker_running(queue, worker_id="capped"):
        await asyncio.sleep(0.5)  # the worker leads and has looked once
        await queue.submit_many([{"title": f"t{i}", "task_type": "t_one"} for i in range(4)])
        await wait_for(queue, functools.partial(_completed, n=4), 20, "all four completed")
