"""``worker --until-idle`` and ``serve --until-idle`` (real processes, both backends): they exit
once nothing left is work for them, saying what is left and why, and not before: a retry in
its backoff, a dependency still running elsewhere and a task executing each keep them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue import AsyncQueue, TaskState

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
HERE = Path(__file__).parent


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "agentqueue.toml"
    config.write_text("[scheduler]\ntick_secs = 0.2\n\n[worker]\npoll_secs = 0.2\n")
    return config


def _env(db_url: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    environ["AGENTQUEUE_DB"] = db_url
    environ["PYTHONPATH"] = str(HERE)
    return environ


def _command(config: Path, command: str, task_types: str, *extra: str) -> list[str]:
    return [
        AGENTQUEUE, "--config", str(config), command, "--app", "idle_app:queue",
        "--task-types", task_types, *extra,
    ]  # fmt: skip


async def _until_idle(
    db_url: str, tmp_path: Path, command: str, task_types: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    if command == "serve":
        extra = (*extra, "--port", "0")
    args = _command(_config(tmp_path), command, task_types, "--until-idle", *extra)
    done = await asyncio.to_thread(
        subprocess.run, args, cwd=tmp_path, env=_env(db_url), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("command", ["worker", "serve"])
async def test_until_idle_exits_leaving_what_it_cannot_run_and_says_why(
    db_url: str, tmp_path: Path, command: str
) -> None:
    async with AsyncQueue(db_url) as queue:
        ran = await queue.submit(title="runs", task_type="step")
        # No handler takes bugfix, translate is left out by --task-types, docs is paused.
        nobody = await queue.submit(title="no handler", task_type="bugfix")
        left_out = await queue.submit(title="left out", task_type="translate")
        await queue.pause("docs", actor="test", reason="incident")
        paused = await queue.submit(title="paused", task_type="docs")
    done = await _until_idle(db_url, tmp_path, command, "step,docs")
    async with AsyncQueue(db_url) as queue:
        assert (await queue.get(ran.task.id)).state is TaskState.COMPLETED
        for task in (nobody, left_out, paused):
            assert (await queue.get(task.task.id)).state in (TaskState.PENDING, TaskState.QUEUED)
    report = done.stderr
    assert "idle: 3 tasks left that it cannot run" in report, report
    assert (
        f"1  not_served: no handler or agent in this process takes task type 'bugfix' "
        f"(e.g. {nobody.task.id})" in report
    )
    assert (
        f"1  not_served: task type 'translate' is left out of this process by its options "
        f"(e.g. {left_out.task.id})" in report
    )
    assert (
        f"1  paused: task type 'docs' is paused: `agentqueue resume docs` "
        f"(e.g. {paused.task.id})" in report
    )


async def test_until_idle_waits_for_a_retry_in_its_backoff(db_url: str, tmp_path: Path) -> None:
    async with AsyncQueue(db_url) as queue:
        flaky = await queue.submit(title="fails once", task_type="flaky")
    done = await _until_idle(db_url, tmp_path, "worker", "flaky")
    async with AsyncQueue(db_url) as queue:
        task = await queue.get(flaky.task.id)
    assert (task.state, task.retry_count) == (TaskState.COMPLETED, 1), done.stderr[-3000:]
    assert "idle: no tasks left" in done.stderr


async def test_until_idle_waits_for_a_task_it_is_executing(db_url: str, tmp_path: Path) -> None:
    async with AsyncQueue(db_url) as queue:
        slow = await queue.submit(title="runs a while", task_type="slow", payload={"secs": 3})
    # No grace at the stop: stopping while it runs would put it back in the queue.
    done = await _until_idle(db_url, tmp_path, "worker", "slow", "--grace", "0")
    async with AsyncQueue(db_url) as queue:
        assert (await queue.get(slow.task.id)).state is TaskState.COMPLETED, done.stderr[-3000:]


async def test_until_idle_waits_for_a_dependency_another_process_is_running(
    db_url: str, tmp_path: Path
) -> None:
    async with AsyncQueue(db_url) as queue:
        first = await queue.submit(title="elsewhere", task_type="slow", payload={"secs": 3})
        then = await queue.submit(title="then", task_type="step", depends_on=[first.task.id])
    # Another worker runs the dependency; this one only runs steps, so nothing but the
    # dependency it will release keeps it.
    other = await asyncio.to_thread(
        subprocess.Popen,
        _command(_config(tmp_path), "worker", "slow", "--no-scheduler"),
        cwd=tmp_path, env=_env(db_url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with AsyncQueue(db_url) as queue:
            for _ in range(600):  # wait for the other worker to be running it
                if (await queue.get(first.task.id)).state is TaskState.EXECUTING:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the other worker never ran the dependency")
        done = await _until_idle(db_url, tmp_path, "worker", "step")
    finally:
        other.terminate()
        other.wait(timeout=60)
    async with AsyncQueue(db_url) as queue:
        assert (await queue.get(first.task.id)).state is TaskState.COMPLETED
        assert (await queue.get(then.task.id)).state is TaskState.COMPLETED, done.stderr[-3000:]
