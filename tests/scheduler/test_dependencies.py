"""Dependencies (R13) on each backend: a DAG runs in a valid order, a failed dependency cancels
its whole subtree, cycles are refused at submit, and a task blocked for any other reason is never
released by the dependency step (the seed's Bug-B)."""

from __future__ import annotations

import random
import uuid
from uuid import UUID

import pytest

from agentqueue import AsyncQueue, TaskState
from agentqueue.domain.errors import InvalidInput
from agentqueue.domain.states import HOLD_APPROVAL, Action, Request
from agentqueue.service.records import decide_and_apply

S = TaskState


async def run_until_idle(queue: AsyncQueue, fail: set[UUID] = frozenset()) -> list[UUID]:  # type: ignore[assignment]
    """Drive ticks, claims and outcomes until nothing moves; return the completion order."""
    done: list[UUID] = []
    for _ in range(500):
        await queue.tick()
        claimed = await queue.claim(7, "w")
        if not claimed:
            report = await queue.tick()
            if not (report.admitted or report.released or report.cancelled):
                return done
            continue
        for task in claimed:
            assert task.lock_token is not None
            if task.id in fail:
                await queue.fail(task.id, task.lock_token, "broken", retryable=False)
            else:
                await queue.complete(task.id, task.lock_token)
                done.append(task.id)
    raise AssertionError("the queue never went idle")


async def test_a_dag_of_50_tasks_runs_in_a_valid_order(queue: AsyncQueue) -> None:
    rng = random.Random(7)
    ids = [uuid.uuid4() for _ in range(50)]
    deps = {ids[i]: rng.sample(ids[:i], k=min(i, rng.randint(0, 3))) for i in range(50)}
    specs = [
        {"id": str(i), "title": f"step {n}", "task_type": "build", "depends_on": deps[i]}
        for n, i in enumerate(ids)
    ]
    rng.shuffle(specs)  # a batch may name tasks that come later in it
    results = await queue.submit_many(specs)
    assert {r.task.id for r in results} == set(ids)
    blocked = {r.task.id for r in results if r.task.state is S.BLOCKED}
    assert blocked == {i for i in ids if deps[i]}
    order = await run_until_idle(queue)
    assert sorted(order) == sorted(ids)
    position = {task_id: n for n, task_id in enumerate(order)}
    for task_id, before in deps.items():
        for dep in before:
            assert position[dep] < position[task_id], "a task ran before its dependency"
    assert (await queue.verify()).ok


async def test_a_failed_dependency_cancels_its_whole_subtree(queue: AsyncQueue) -> None:
    a, b, c, d, e = (uuid.uuid4() for _ in range(5))
    await queue.submit_many(
        [
            {"id": str(a), "title": "a", "task_type": "build"},
            {"id": str(b), "title": "b", "task_type": "build", "depends_on": [a]},
            {"id": str(c), "title": "c", "task_type": "build", "depends_on": [b]},
            {"id": str(d), "title": "d", "task_type": "build", "depends_on": [b, e]},
            {"id": str(e), "title": "e", "task_type": "build"},
        ]
    )
    done = await run_until_idle(queue, fail={a})
    assert done == [e]
    states = {t: (await queue.get(t)).state for t in (a, b, c, d, e)}
    assert states == {a: S.FAILED, b: S.CANCELLED, c: S.CANCELLED, d: S.CANCELLED, e: S.COMPLETED}
    assert (await queue.get(b)).state_reason == f"dependency {a} is failed"
    assert (await queue.get(c)).state_reason == f"dependency {b} is cancelled"
    [*_, cancel] = await queue.events(c)
    assert (cancel.action, cancel.actor) == ("cancel", "scheduler")


async def test_cancelling_or_dead_lettering_a_dependency_cancels_dependents(
    queue: AsyncQueue,
) -> None:
    first = await queue.submit(title="first", task_type="build", max_retries=0)
    second = await queue.submit(title="second", task_type="build")
    after_first = await queue.submit(title="x", task_type="build", depends_on=[first.task.id])
    after_second = await queue.submit(title="y", task_type="build", depends_on=[second.task.id])
    await queue.cancel(second.task.id, actor="person", reason="not needed")
    await queue.tick()
    [claimed] = await queue.claim(1, "w")
    assert claimed.lock_token is not None
    await queue.fail(claimed.id, claimed.lock_token, "boom", retryable=True)  # no retries left
    assert (await queue.get(first.task.id)).state is S.DEAD_LETTER
    await queue.tick()
    x, y = await queue.get(after_first.task.id), await queue.get(after_second.task.id)
    assert (x.state, x.state_reason) == (S.CANCELLED, f"dependency {first.task.id} is dead_letter")
    assert (y.state, y.state_reason) == (S.CANCELLED, f"dependency {second.task.id} is cancelled")


async def test_a_dependency_already_complete_at_submit_releases_at_the_next_tick(
    queue: AsyncQueue,
) -> None:
    dep = await queue.submit(title="dep", task_type="build")
    await run_until_idle(queue)
    after = await queue.submit(title="after", task_type="build", depends_on=[dep.task.id])
    assert after.task.state is S.BLOCKED
    report = await queue.tick()
    assert report.released == 1 and report.admitted == 1
    events = [(e.from_state, e.to_state, e.actor) for e in await queue.events(after.task.id)]
    assert events == [
        (None, S.PENDING, "api"),
        (S.PENDING, S.BLOCKED, "scheduler"),
        (S.BLOCKED, S.PENDING, "scheduler"),
        (S.PENDING, S.QUEUED, "scheduler"),
    ]


async def test_a_cycle_is_refused_at_submit_and_nothing_is_written(queue: AsyncQueue) -> None:
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    with pytest.raises(InvalidInput) as caught:
        await queue.submit_many(
            [
                {"id": a, "title": "a", "task_type": "build", "depends_on": [c]},
                {"id": b, "title": "b", "task_type": "build", "depends_on": [a]},
                {"id": c, "title": "c", "task_type": "build", "depends_on": [b]},
                {"title": "innocent", "task_type": "build"},
            ]
        )
    [problem] = caught.value.problems
    assert problem.field == "tasks[0].depends_on" and "forms a cycle" in problem.message
    assert (await queue.stats()).total == 0


async def test_a_task_depending_on_itself_is_a_cycle(queue: AsyncQueue) -> None:
    me = str(uuid.uuid4())
    with pytest.raises(InvalidInput, match="forms a cycle"):
        await queue.submit(id=me, title="me", task_type="build", depends_on=[me])


async def test_unknown_or_foreign_dependencies_are_refused(queue: AsyncQueue) -> None:
    theirs = await queue.submit(title="theirs", task_type="build", tenant="other")
    for dep in (uuid.uuid4(), theirs.task.id):
        with pytest.raises(InvalidInput) as caught:
            await queue.submit(title="mine", task_type="build", depends_on=[dep])
        assert caught.value.problems[0].field == "depends_on"
    assert (await queue.stats()).total == 1


async def test_the_same_id_again_is_the_same_task(queue: AsyncQueue) -> None:
    chosen = str(uuid.uuid4())
    first = await queue.submit(id=chosen, title="once", task_type="build")
    again = await queue.submit(id=chosen, title="once", task_type="build")
    assert again.task.id == first.task.id and not again.created and again.matched_by == "id"
    with pytest.raises(InvalidInput) as caught:
        await queue.submit(id=chosen, title="once", task_type="build", tenant="other")
    assert caught.value.problems[0].field == "id"


async def test_a_task_blocked_for_approval_is_never_released_by_the_dependency_step(
    queue: AsyncQueue,
) -> None:
    """Bug-B: a blocked task with an empty depends_on must stay blocked."""
    held = await queue.submit(title="drop table users", task_type="maintenance")
    rt = await queue.runtime()
    async with rt.store.transaction() as tx:
        tasks = await tx.lock([held.task.id])
        await decide_and_apply(
            tx,
            tasks,
            lambda t: Request(Action.BLOCK, rt.clock.now(), actor="guardrail", hold=HOLD_APPROVAL),
        )
    other = await queue.submit(title="unrelated", task_type="build")
    dependent = await queue.submit(title="next", task_type="build", depends_on=[other.task.id])
    await run_until_idle(queue)
    task = await queue.get(held.task.id)
    assert (task.state, task.hold, task.depends_on) == (S.BLOCKED, "approval", ())
    assert (await queue.get(dependent.task.id)).state is S.COMPLETED
