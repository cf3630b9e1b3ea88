"""Running workers from Python (run_worker, sync and async) and worker set-up errors."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from worker_helpers import ended, wait_for, worker_running

from agentqueue import AsyncQueue, ConfigError, Queue, Task, TaskContext, TaskState
from agentqueue.cli import main
from agentqueue.config import Settings

S = TaskState


def fast_settings(**worker: Any) -> Settings:
    return Settings(worker={"poll_secs": 0.1, **worker}, queue={"lease_ttl_secs": 5})


async def wait_until_ended(queue: AsyncQueue, n: int, within: float = 20) -> None:
    await wait_for(queue, functools.partial(ended, n=n), within, f"{n} task(s) ended")


async def test_run_worker_runs_async_and_sync_handlers_until_stopped(db_url: str) -> None:
    queue = AsyncQueue(db_url, settings=fast_settings())
    seen: list[tuple[str, str]] = []

    @queue.handler("async_kind")
    async def a(task: Task, ctx: TaskContext) -> dict[str, Any]:
        seen.append(("async", threading.current_thread().name))
        return {"double": ctx.payload["n"] * 2}

    @queue.handler("sync_kind")
    def b(task: Task, ctx: TaskContext) -> dict[str, Any]:
        seen.append(("sync", threading.current_thread().name))
        return {"triple": ctx.payload["n"] * 3}

    first = (await queue.submit(title="a", task_type="async_kind", payload={"n": 2})).task
    second = (await queue.submit(title="b", task_type="sync_kind", payload={"n": 2})).task
    async with worker_running(queue, worker_id="in-process"):
        await wait_until_ended(queue, 2)
        assert (await queue.get(first.id)).result == {"double": 4}
        assert (await queue.get(second.id)).result == {"triple": 6}
        claim = next(e for e in await queue.events(first.id) if e.action == "claim")
    threads = dict(seen)
    assert threads["async"] == threading.current_thread().name  # on the event loop
    assert threads["sync"].startswith("agentqueue-handler")  # in the thread pool
    assert claim.actor == "in-process"


def test_the_sync_facade_runs_a_worker_until_stop_worker(tmp_path: Path) -> None:
    queue = Queue(f"sqlite:///{tmp_path / 'sync.db'}", settings=fast_settings())

    @queue.handler("docs")
    def docs(task: Task, ctx: TaskContext) -> str:
        return task.title.upper()

    made = queue.submit(title="hello", task_type="docs").task
    thread = threading.Thread(target=queue.run_worker, kwargs={"concurrency": 2})
    thread.start()
    deadline = time.monotonic() + 20
    while queue.get(made.id).state is not S.COMPLETED:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    queue.stop_worker()
    thread.join(10)
    assert not thread.is_alive()
    assert queue.get(made.id).result == "HELLO"
    queue.close()


async def test_ctx_heartbeat_renews_the_lease_before_the_regular_heartbeat(db_url: str) -> None:
    queue = AsyncQueue(db_url, settings=fast_settings(heartbeat_secs=60))
    renewed = asyncio.Event()

    @queue.handler("slow")
    async def slow(task: Task, ctx: TaskContext) -> None:
        await asyncio.sleep(0.3)
        ctx.heartbeat()
        await renewed.wait()

    made = (await queue.submit(title="s", task_type="slow")).task
    async with worker_running(queue):
        deadline = time.monotonic() + 10
        while True:
            task = await queue.get(made.id)
            if task.state is S.EXECUTING and task.heartbeat_at != task.locked_at:
                break
            assert time.monotonic() < deadline, "the lease was not renewed"
            await asyncio.sleep(0.05)
        assert task.heartbeat_at is not None and task.locked_at is not None
        assert task.heartbeat_at > task.locked_at
        renewed.set()
        await wait_until_ended(queue, 1)


def test_a_task_type_served_by_a_handler_and_an_agent_is_refused(tmp_path: Path) -> None:
    settings = Settings(
        agents={"fixer": {"command": [sys.executable, "-c", "pass"], "task_types": ["bugfix"]}}
    )
    queue = AsyncQueue(f"sqlite:///{tmp_path / 'c.db'}", settings=settings)

    @queue.handler("bugfix")
    def fix(task: Task, ctx: TaskContext) -> None:
        return None

    with pytest.raises(ConfigError, match="'bugfix' is served by both handlers and fixer"):
        queue.worker()
    with pytest.raises(ConfigError, match="no agent named 'nobody'"):
        queue.worker(agents=["nobody"])
    with pytest.raises(ConfigError, match="no handler or agent serves task type 'docs'"):
        queue.worker(task_types=["docs"])
    assert [e.name for e in queue.worker(agents=["fixer"]).executors] == ["fixer"]


def test_a_worker_with_nothing_to_run_exits_2_saying_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{tmp_path / 'n.db'}", "worker"])
    assert result.exit_code == 2
    assert "nothing to run" in result.stderr


def test_an_app_that_cannot_be_imported_exits_2_naming_it(tmp_path: Path) -> None:
    args = ["--db", f"sqlite:///{tmp_path / 'n.db'}", "worker", "--app", "no_such_module:q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "app: cannot import no_such_module" in result.stderr


@pytest.mark.parametrize("cap_alone", [True, False], ids=["cap-alone", "cap-and-rate"])
async def test_under_limits_the_admitting_worker_claims_in_the_admissions_transaction(
    db_url: str, cap_alone: bool
) -> None:
    """Under a global cap alone the worker's claims admit what they take; with a rate limit
    too, the worker's own scheduler admits each task and, in the same transaction, the worker
    claims it. Either way the claim event carries the admission's time, so no notice and no
    separate claim stood between them, and the cap still counts the claimed tasks."""
    limits: dict[str, Any] = {"admission": {"max_active": 2}}
    if not cap_alone:
        limits["task_types"] = {"job": {"rate_limit": "jobs"}}
        limits["rate_limits"] = {"jobs": {"per_minute": 6000, "burst": 100}}
    settings = Settings(worker={"poll_secs": 0.1}, queue={"lease_ttl_secs": 5}, **limits)
    assert settings.claims_admit is cap_alone
    queue = AsyncQueue(db_url, settings=settings)
    running_now: list[int] = []
    gate = asyncio.Event()

    @queue.handler("job")
    async def job(task: Task, ctx: TaskContext) -> None:
        running_now.append(1)
        await gate.wait()

    async with worker_running(queue, worker_id="admitter"):
        try:
            submitted = [
                (await queue.submit(title=f"t{i}", task_type="job")).task for i in range(5)
            ]
            deadline = time.monotonic() + 20
            while len(running_now) < 2:
                assert time.monotonic() < deadline, (await queue.stats()).by_state
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a third would start now if the cap did not hold
            assert len(running_now) == 2
            assert (await queue.stats()).by_state[S.PENDING] == 3
        finally:
            gate.set()  # the handlers end, so the worker stops, whatever was asserted
        await wait_until_ended(queue, 5)
        histories = [await queue.events(task.id) for task in submitted]
    for history in histories:
        events = {e.action: e for e in history}
        # The worker's claim admits under a cap alone; else its scheduler does.
        assert (events["admit"].actor == "admitter") is cap_alone
        assert events["claim"].actor == "admitter"
        assert events["claim"].at == events["admit"].at


async def test_under_a_cap_alone_a_pending_p0_task_preempts_a_long_running_one(
    db_url: str,
) -> None:
    """R11 when claims admit: a P0 task waits in pending for a claim, and the worker with every
    slot busy asks its long-running P8 attempt to yield; the P0 task takes the slot, and the
    yielded task (queued again, not a retry) runs after it. (That a claim takes a pending P0
    task before a queued one is the store contract's: here the slot frees before the yielded
    task's outcome is written.)"""
    settings = Settings(
        worker={"poll_secs": 0.1},
        admission={"max_active": 5},
        preemption={"after_secs": 0.3},
    )
    assert settings.claims_admit
    queue = AsyncQueue(db_url, settings=settings)
    began: list[str] = []
    finish = asyncio.Event()

    @queue.handler("job")
    async def job(task: Task, ctx: TaskContext) -> None:
        began.append(task.title)
        step = 0
        while task.priority != 0 and not finish.is_set():  # checkpointing: it may yield
            await asyncio.sleep(0.05)
            step += 1
            ctx.checkpoint({"step": step})

    async with worker_running(queue, worker_id="w", concurrency=1):
        try:
            slow = (await queue.submit(title="reindex", task_type="job", priority=8)).task
            deadline = time.monotonic() + 20
            while began != ["reindex"]:
                assert time.monotonic() < deadline, (await queue.stats()).by_state
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # it has run past after_secs
            urgent = await queue.submit(
                title="fix prod", task_type="job", priority=0, idempotency_key="fix-prod"
            )
            while (await queue.get(urgent.task.id)).state is not S.COMPLETED:
                assert time.monotonic() < deadline, (await queue.stats()).by_state
                await asyncio.sleep(0.05)
            while len(began) < 3:  # the yielded task is claimed back after the P0 one
                assert time.monotonic() < deadline, began
                await asyncio.sleep(0.05)
            assert began[:3] == ["reindex", "fix prod", "reindex"]
            actions = [e.action for e in await queue.events(slow.id)]
            assert "preempt" in actions and "fail" not in actions
            assert (await queue.get(slow.id)).retry_count == 0
        finally:
            finish.set()  # the attempt ends, so the worker stops, whatever was asserted


async def test_the_first_claims_are_sent_before_waiters_on_started_wake(db_url: str) -> None:
    """A worker's first claims take their first steps (the store's claim called, so on
    PostgreSQL the statement on its way) before anything waiting for ``started`` runs: the CLI's
    freeze of the startup heap (a full collection) and the rest of the start-up's own work go on
    while the database answers, not ahead of it."""
    queue = AsyncQueue(db_url, settings=fast_settings())

    @queue.handler("noop")
    async def noop(task: Task, ctx: TaskContext) -> None:
        return None

    await queue.submit(title="t", task_type="noop")
    called: list[str] = []
    real = queue.store.claim

    async def claim(p: Any) -> Any:
        called.append("claim")
        return await real(p)

    queue.store.claim = claim  # type: ignore[method-assign]
    worker = queue.worker(worker_id="first")
    seen: list[list[str]] = []

    async def on_started() -> None:
        await worker.started.wait()
        seen.append(list(called))
        worker.stop()

    waiter = asyncio.create_task(on_started())
    await asyncio.wait_for(worker.run(), 30)
    await waiter
    await queue.close()
    assert seen == [["claim"]]
