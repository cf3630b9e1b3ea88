"""Workers running command agents, as real processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest
from worker_helpers import FAST_CONFIG, ended, wait_for

from agentqueue import AsyncQueue, Task, TaskState

S = TaskState
AGENT = Path(__file__).with_name("e2e_agent.py")


@pytest.fixture
def config_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    path = tmp_path / "agentqueue.toml"
    # Tests that watch the agents' host pids (written to a file of the test's) run them
    # unsandboxed, as the worker's user; the sandboxed tree's end is proven in
    # tests/executors/test_isolation_adversarial.py.
    host = request.node.get_closest_marker("host_processes") is not None
    worker_extra = 'run_as = "root"' if host else ""
    agent_extra = 'isolation = "none"' if host else ""
    path.write_text(
        FAST_CONFIG
        + f"""workdir = "{tmp_path / "runs"}"
{worker_extra}

[agents.e2e]
command = ["{sys.executable}", "{AGENT}"]
task_types = ["agent"]
max_concurrent = 20
kill_grace_secs = 1
{agent_extra}
"""
    )
    return path


def pids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line.split()[1]) for line in path.read_text().splitlines()]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def until(predicate, within: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what} did not happen within {within}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


@pytest.mark.host_processes
async def test_cancel_kills_the_agent_and_its_grandchild_within_2_seconds(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    task = (
        await live_queue.submit(
            title="stubborn",
            task_type="agent",
            payload={
                "pids": str(pidfile),
                "grandchild": str(pidfile),
                "ignore_term": True,
                "sleep": 120,
            },
        )
    ).task
    start_worker("--agent", "e2e")
    await until(lambda: len(pids(pidfile)) == 2, 20, "the agent and its grandchild to start")
    assert all(alive(pid) for pid in pids(pidfile))

    await live_queue.cancel(task.id, actor="operator", reason="not needed")
    took = await until(lambda: not any(alive(pid) for pid in pids(pidfile)), 2.0, "tree gone")
    assert took < 2.0
    cancelled = await live_queue.get(task.id)
    assert cancelled.state is S.CANCELLED
    last = (await live_queue.events(task.id))[-1]
    assert (last.to_state, last.actor, last.reason) == (S.CANCELLED, "operator", "not needed")


@pytest.mark.host_processes
async def test_timeout_kills_the_tree_and_counts_as_a_retryable_timeout(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    task = (
        await live_queue.submit(
            title="slow",
            task_type="agent",
            timeout_secs=1,
            max_retries=1,
            payload={
                "pids": str(pidfile),
                "grandchild": str(pidfile),
                "ignore_term": True,
                "sleep": 120,
            },
        )
    ).task
    start_worker("--agent", "e2e")
    await wait_for(live_queue, lambda c: c[S.DEAD_LETTER] == 1, within=30, what="dead letter")
    dead = await live_queue.get(task.id)
    assert dead.retry_count == 1 and "timed out after 1s" in (dead.error or "")
    events = await live_queue.events(task.id)
    assert [e.to_state for e in events if e.action == "fail"] == [S.RETRYING, S.DEAD_LETTER]
    assert len(pids(pidfile)) == 4  # two attempts, each an agent and a grandchild
    await until(lambda: not any(alive(pid) for pid in pids(pidfile)), 3.0, "every tree gone")


async def test_bad_agent_output_fails_its_task_clearly_and_the_worker_goes_on(
    live_queue: AsyncQueue, start_worker
) -> None:
    async def agent_task(title: str, **payload: object) -> Task:
        return (await live_queue.submit(title=title, task_type="agent", payload=payload)).task

    garbage = await agent_task("garbage", garbage=True)
    flood = await agent_task("flood", flood=20_000_000, garbage=True)
    bad_file = await agent_task("bad result file", bad_result_file=True)
    crash = await agent_task("crash", exit=3)
    good = await agent_task("ok", n=1)
    worker = start_worker("--agent", "e2e")
    await wait_for(live_queue, lambda c: ended(c, 5), within=60, what="all five to end")

    assert "not JSON" in ((await live_queue.get(garbage.id)).error or "")
    flooded = await live_queue.get(flood.id)
    assert flooded.state is S.FAILED and "not JSON" in (flooded.error or "")
    stdout = [r for r in await live_queue.logs(flood.id) if r.stream == "stdout"]
    assert stdout and stdout[0].truncated and len(stdout[0].text) <= 1024 * 1024
    assert "result.json is not valid JSON" in ((await live_queue.get(bad_file.id)).error or "")
    crashed = await live_queue.get(crash.id)
    assert crashed.state is S.FAILED and "exit code 3" in (crashed.error or "")
    assert (await live_queue.get(good.id)).state is S.COMPLETED
    assert worker.proc.poll() is None

    later = (await live_queue.submit(title="later", task_type="agent", payload={"n": 2})).task
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 2, what="a later task")
    assert (await live_queue.get(later.id)).result["payload"] == {"n": 2}


async def test_200_agent_runs_from_20_tenants_each_see_only_their_own_task(
    live_queue: AsyncQueue, start_worker
) -> None:
    made = [
        r.task
        for r in await live_queue.submit_many(
            {
                "title": f"a{i}",
                "task_type": "agent",
                "tenant": f"tenant-{i % 20}",
                "payload": {"n": i, "secret": f"{i}-{i % 20}"},
            }
            for i in range(200)
        )
    ]
    start_worker("--agent", "e2e", "--concurrency", "20")
    await wait_for(live_queue, lambda c: ended(c, 200), within=120, what="200 agent runs")
    for submitted in made:
        task = await live_queue.get(submitted.id)
        assert task.state is S.COMPLETED, task.error
        assert task.result == {
            "task_id": str(submitted.id),
            "task_tenant": submitted.tenant,
            "payload": submitted.payload,
        }


@pytest.mark.host_processes
async def test_a_worker_killed_with_sigkill_leaves_no_agent_running(
    live_queue: AsyncQueue, start_worker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    task = (
        await live_queue.submit(
            title="orphan?",
            task_type="agent",
            payload={"pids": str(pidfile), "grandchild": str(pidfile), "sleep": 120},
        )
    ).task
    worker = start_worker("--agent", "e2e")
    await until(lambda: len(pids(pidfile)) == 2, 20, "the agent and its grandchild to start")
    worker.signal(signal.SIGKILL)
    worker.wait()
    await until(lambda: not any(alive(pid) for pid in pids(pidfile)), 3.0, "orphans gone")
    # The lease lapses and the scheduler of the next worker takes the task back and runs it.
    start_worker("--agent", "e2e")
    started = time.monotonic()
    while True:
        again = await live_queue.get(task.id)
        if again.retry_count == 1 and again.state is S.EXECUTING:
            break
        assert time.monotonic() - started < 30, again
        await asyncio.sleep(0.1)
    await until(lambda: len(pids(pidfile)) == 4, 20, "the second attempt to start")
    await live_queue.cancel(again.id, actor="test")
