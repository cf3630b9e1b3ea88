"""Why a task waits (``show``, ``GET /v1/tasks/{id}``), read with only what its reasons draw
on: no count of the admitted work for a queued or blocked task, nor for a pending one under no
cap, no read at all for an executing one, and for each state tried (queued, pending, blocked,
executing, retrying) the same reasons as from all the facts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from scheduler_helpers import agent

from agentqueue import AsyncQueue, TaskState
from agentqueue.domain.models import Task
from agentqueue.domain.waiting import why_waiting
from agentqueue.service import waiting
from agentqueue.service.runtime import Runtime

OpenQueue = Callable[..., Any]


def counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name`` (which still runs)."""
    calls: list[int] = []
    real = getattr(owner, name)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


async def every_fact(rt: Runtime, task: Task) -> list[str]:
    """The reasons from every fact read (the admitted work included)."""
    facts = await waiting._facts(rt, [task], None)
    return [r.text for r in why_waiting(task, facts)]


async def texts(rt: Runtime, task: Task) -> list[str]:
    return [r.text for r in await waiting.why(rt, task)]


async def fresh(queue: AsyncQueue, task: Task) -> Task:
    found = await queue.get(task.id)
    assert found is not None
    return found


async def test_each_state_gets_the_reasons_of_every_fact(open_queue: OpenQueue) -> None:
    """Queued, pending at its agent's cap, blocked behind that pending task, executing, then
    retrying: each task's reasons as every fact gives them, the cap's among them."""
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 1)})
    rt = await queue.runtime()
    first = (await queue.submit(title="first", task_type="bugfix")).task
    second = (await queue.submit(title="second", task_type="bugfix")).task
    after = (await queue.submit(title="after", task_type="bugfix", depends_on=[second.id])).task
    assert [t.id for t in await queue.admit()] == [first.id]
    first, second, after = [await fresh(queue, t) for t in (first, second, after)]
    assert (first.state, second.state, after.state) == (
        TaskState.QUEUED,
        TaskState.PENDING,
        TaskState.BLOCKED,
    )
    for task in (first, second, after):
        assert await texts(rt, task) == await every_fact(rt, task), task.title
    assert any("fixer (1/1) at the cap" in t for t in await texts(rt, second))
    assert any("waits for 1 of 1 dependencies" in t for t in await texts(rt, after))
    [claimed] = await queue.claim(1, "w")
    executing = await fresh(queue, claimed)
    assert executing.state is TaskState.EXECUTING
    assert await texts(rt, executing) == await every_fact(rt, executing)
    assert any("executing in w" in t for t in await texts(rt, executing))
    await queue.fail(executing.id, executing.lock_token, "flaky", retryable=True)
    assert [t.id for t in await queue.admit()] == [second.id]  # the slot it left
    retrying = await fresh(queue, executing)
    assert retrying.state is TaskState.RETRYING
    assert await texts(rt, retrying) == await every_fact(rt, retrying)
    assert any("after backoff" in t for t in await texts(rt, retrying))
    assert any("fixer (1/1) at the cap" in t for t in await texts(rt, retrying))


async def test_only_a_task_whose_reasons_need_the_admitted_work_counts_it(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of admitted work reads every queued and executing task's row: a queued task's
    reasons skip it, an executing task's read nothing, a pending task routed to an agent (its
    cap) counts it, a task blocked behind it does not (a dependency at a cap moves)."""
    queue = await open_queue(agents={"fixer": agent(["bugfix"], 1)})
    rt = await queue.runtime()
    first = (await queue.submit(title="first", task_type="bugfix")).task
    second = (await queue.submit(title="second", task_type="bugfix")).task
    after = (await queue.submit(title="after", task_type="bugfix", depends_on=[second.id])).task
    await queue.admit()
    loads = counted(monkeypatch, rt.store, "active_load")
    pauses = counted(monkeypatch, rt, "paused_types")
    await waiting.why(rt, await fresh(queue, first))
    assert (len(loads), len(pauses)) == (0, 1)
    await waiting.why(rt, await fresh(queue, second))
    assert (len(loads), len(pauses)) == (1, 2)
    blocked = await fresh(queue, after)
    assert blocked.state is TaskState.BLOCKED
    assert any("waits for 1 of 1 dependencies" in t for t in await texts(rt, blocked))
    assert (len(loads), len(pauses)) == (1, 3)
    [claimed] = await queue.claim(1, "w")
    executing = await fresh(queue, claimed)
    loads.clear()
    pauses.clear()  # the claim reads the paused types too
    assert await texts(rt, executing)
    assert (len(loads), len(pauses)) == (0, 0)


async def test_a_pending_task_under_no_cap_reads_no_admitted_work(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a global cap or agents, no reason a pending task has draws on the admitted work:
    a task delayed by ``run_after`` says when it is due, and counts nothing; under a global cap
    the same task counts it (the cap may be reached)."""
    for admission, reads in (({}, 0), ({"max_active": 5}, 1)):
        queue = await open_queue(admission=admission)
        rt = await queue.runtime()
        later = rt.clock.now() + timedelta(hours=1)
        task = (await queue.submit(title="later", task_type="docs", run_after=later)).task
        assert (await fresh(queue, task)).state is TaskState.PENDING
        loads = counted(monkeypatch, rt.store, "active_load")
        said = await texts(rt, await fresh(queue, task))
        assert any("not before" in t for t in said), said
        assert said == await every_fact(rt, await fresh(queue, task))
        assert len(loads) == reads + 1  # every_fact counts it once
