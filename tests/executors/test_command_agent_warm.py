"""Launchers started ahead of their attempts (``CommandAgent(warm=True)``, as a worker builds
its agents): each attempt still gets its own working directory, environment and input; a
launcher that died while it waited costs nothing but a cold start; closing the agent leaves no
launcher and no cgroup behind. Real subprocesses, sandboxed as by default. (Every test of the
run_agent fixture and every adversarial test runs both ways, cold and warm.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from agent_harness import agent_settings, alive, control, make_task

from agentqueue.executors.base import AttemptEnd
from agentqueue.executors.isolation import CGROUP_PIDS
from agentqueue.executors.subprocess import CommandAgent


def _launchers(agent: CommandAgent) -> list[int]:
    return [w.transport.get_pid() for w in agent._warm]


def _warm_cgroups() -> set[str]:
    base = CGROUP_PIDS / "agentqueue"
    prefix = f"w{os.getpid()}-warm-"
    return {p.name for p in base.glob(f"{prefix}*")} if base.exists() else set()


async def test_attempts_through_launchers_started_ahead_get_their_own_directory_and_env(
    runs_root: Path,
) -> None:
    agent = CommandAgent(
        "warm", agent_settings("env", "task", max_concurrent=2), runs_root, warm=True
    )
    try:
        assert await agent.warm_up() == 2
        waiting = _launchers(agent)
        assert all(alive(pid) for pid in waiting)
        seen = []
        for _ in range(3):
            task = make_task()
            result = await agent.run(task, control())
            assert result.end is AttemptEnd.COMPLETED, result.error
            env_line, task_line = result.logs[0].text.splitlines()[:2]
            env = json.loads(env_line)
            got = json.loads(task_line)
            # The attempt's own environment, not the launcher's (started with an empty one).
            assert env["AGENTQUEUE_TASK_ID"] == str(task.id)
            assert env["AGENTQUEUE_WORKDIR"] == got["cwd"]
            assert Path(got["cwd"]).name.startswith(str(task.id))
            assert got["stdin"]["id"] == str(task.id)
            seen.append(got["cwd"])
            await asyncio.sleep(0.2)  # the next launcher has started meanwhile
        assert len(set(seen)) == 3
        # The first attempts went through the launchers that were waiting.
        assert not any(alive(pid) for pid in waiting)
    finally:
        agent.close()


async def test_closing_the_agent_ends_its_waiting_launchers_and_their_cgroups(
    runs_root: Path,
) -> None:
    before = _warm_cgroups()
    agent = CommandAgent("warm", agent_settings("print", "1"), runs_root, warm=True)
    assert await agent.warm_up() == 2
    waiting = _launchers(agent)
    assert _warm_cgroups() - before, "the launchers wait in cgroups of their own"
    agent.close()
    for _ in range(100):
        if not any(alive(pid) for pid in waiting) and not (_warm_cgroups() - before):
            break
        await asyncio.sleep(0.05)
    assert not any(alive(pid) for pid in waiting)
    assert not (_warm_cgroups() - before)


async def test_a_launcher_that_died_while_waiting_means_a_cold_start(runs_root: Path) -> None:
    agent = CommandAgent("warm", agent_settings("result", '{"ok": 1}'), runs_root, warm=True)
    try:
        await agent.warm_up()
        for pid in _launchers(agent):
            os.killpg(pid, signal.SIGKILL)
        for _ in range(100):
            if not any(w.transport.get_returncode() is None for w in agent._warm):
                break
            await asyncio.sleep(0.05)
        result = await agent.run(make_task(), control())
        assert result.end is AttemptEnd.COMPLETED, result.error
        assert result.result == {"ok": 1}
    finally:
        agent.close()


_KILLED_WORKER = """
import asyncio, sys, time
from pathlib import Path
from agent_harness import agent_settings, control, make_task
from agentqueue.executors.subprocess import CommandAgent

async def main():
    agent = CommandAgent("warm", agent_settings("sleep", "60"), Path(sys.argv[1]), warm=True)
    await agent.warm_up()
    running = asyncio.create_task(agent.run(make_task(), control(120)))
    await asyncio.sleep(0.5)
    print("running", flush=True)
    await running

asyncio.run(main())
"""

_SWEEPER = """
from agentqueue.executors.isolation import PidsCgroup
made = PidsCgroup.make("probe", 1)
assert made is not None
made.remove()
"""


async def test_the_cgroups_of_a_killed_worker_are_removed_by_the_next_one(
    runs_root: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_WORKER,
        str(runs_root),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert worker.stdout is not None
    line = await asyncio.wait_for(worker.stdout.readline(), 60)
    assert line.strip() == b"running"
    base = CGROUP_PIDS / "agentqueue"
    left = {p.name for p in base.glob(f"w{worker.pid}-*")}
    assert any("warm-" in name for name in left) and len(left) >= 2, left
    worker.kill()  # no clean-up: its launchers die with it, its groups stay
    await worker.wait()
    for _ in range(100):
        sweeper = await asyncio.create_subprocess_exec(sys.executable, "-c", _SWEEPER, env=env)
        assert await sweeper.wait() == 0
        if not list(base.glob(f"w{worker.pid}-*")):
            break
        await asyncio.sleep(0.1)
    assert not list(base.glob(f"w{worker.pid}-*"))
