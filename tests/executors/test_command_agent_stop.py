"""Stopping the whole process tree: timeouts (R6), cancels (R10), the worker dying, and leftovers
of an agent that exited."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_harness import HOST, RunAgent, agent_settings, control, exists, wait_for_pids, wait_gone

from agentqueue.executors.base import AttemptEnd

# These tests watch the agent's processes by their host pids: the launcher's mechanics, the same
# with a sandbox (the adversarial suite stops sandboxed trees too).
pytestmark = pytest.mark.host_processes

STUBBORN = ("ignore", "SIGTERM")  # the agent ignores SIGTERM
TREE = ("agent", "launcher", "grandchild", "hidden")


def stubborn_tree(pids_file: Path) -> tuple[str, ...]:
    """Actions for an agent that ignores SIGTERM, has a grandchild that ignores it too, and a
    descendant that left the process group, then sleeps."""
    where = str(pids_file)
    return (*STUBBORN, "pid", where, "grandchild", where, "hide", where, "sleep", "30")


async def test_deadline_times_out_retryably_and_kills_the_tree(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    started = time.monotonic()
    result = await run_agent(*stubborn_tree(pids_file), kill_grace_secs=0.2, control_=control(1.0))
    elapsed = time.monotonic() - started
    assert result.end is AttemptEnd.TIMED_OUT
    assert result.retryable
    assert result.error == "attempt timed out after 1s"
    assert 1.0 <= elapsed < 2.5
    pids = wait_for_pids(pids_file, *TREE, timeout=0)
    assert wait_gone(pids, 1.0) == []


async def test_settings_timeout_applies_when_earlier_than_the_deadline(
    run_agent: RunAgent,
) -> None:
    started = time.monotonic()
    result = await run_agent("sleep", "30", timeout_secs=1, control_=control(60))
    assert result.end is AttemptEnd.TIMED_OUT
    assert result.error == "attempt timed out after 1s"
    assert time.monotonic() - started < 3


async def test_timeout_sends_sigterm_before_sigkill(run_agent: RunAgent, tmp_path: Path) -> None:
    marker = tmp_path / "term"
    result = await run_agent(
        "on-term", str(marker), "sleep", "30", kill_grace_secs=5, control_=control(0.5)
    )
    assert result.end is AttemptEnd.TIMED_OUT
    assert result.error == "attempt timed out after 0.5s"
    assert marker.read_text() == "term\n"


@pytest.mark.parametrize(
    ("settings_grace", "control_grace"),
    [(None, 0.2), (0.2, 30.0)],
    ids=["control-grace-when-not-configured", "configured-grace-wins"],
)
async def test_kill_grace_comes_from_settings_else_from_the_control(
    run_agent: RunAgent, settings_grace: float | None, control_grace: float
) -> None:
    overrides = {} if settings_grace is None else {"kill_grace_secs": settings_grace}
    started = time.monotonic()
    result = await run_agent(
        *STUBBORN,
        "sleep",
        "30",
        control_=control(0.5, kill_grace_secs=control_grace),
        **overrides,
    )
    assert result.end is AttemptEnd.TIMED_OUT
    assert time.monotonic() - started < 2.0  # not the default 5 s, not the other 30 s


async def test_cancel_kills_a_stubborn_tree_within_two_seconds(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(30)
    attempt = asyncio.create_task(run_agent(*stubborn_tree(pids_file), control_=ctl))
    pids = await asyncio.to_thread(wait_for_pids, pids_file, *TREE)
    cancelled_at = time.monotonic()
    ctl.stop("cancelled by alice: wrong repository")
    result = await asyncio.wait_for(attempt, 2.0)
    assert result.end is AttemptEnd.CANCELLED
    assert result.error == "cancelled by alice: wrong repository"
    left = wait_gone(pids, 2.0 - (time.monotonic() - cancelled_at))
    assert left == [], f"still running 2 s after the cancel: {left}"


async def test_cancel_sends_sigterm_first(run_agent: RunAgent, tmp_path: Path) -> None:
    marker, pids_file = tmp_path / "term", tmp_path / "pids"
    ctl = control(30, cancel_grace_secs=1.0)
    attempt = asyncio.create_task(
        run_agent("on-term", str(marker), "pid", str(pids_file), "sleep", "30", control_=ctl)
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    ctl.stop("shutdown")
    result = await attempt
    assert result.end is AttemptEnd.CANCELLED
    assert marker.read_text() == "term\n"


async def test_cancel_before_start_runs_nothing(run_agent: RunAgent, runs_root: Path) -> None:
    ctl = control(30)
    ctl.stop("cancelled early")
    result = await run_agent("print", "1", control_=ctl)
    assert (result.end, result.error) == (AttemptEnd.CANCELLED, "cancelled early")
    assert not exists(runs_root)


async def test_cancelling_the_run_coroutine_kills_the_tree(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    attempt = asyncio.create_task(run_agent(*stubborn_tree(pids_file)))
    pids = await asyncio.to_thread(wait_for_pids, pids_file, *TREE)
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    assert await asyncio.to_thread(wait_gone, pids, 2.0) == []


async def test_leftovers_of_an_agent_that_exited_are_killed(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    where = str(pids_file)
    started = time.monotonic()
    result = await run_agent(
        "grandchild", where, "escape", where, "hide", where, "sleep", "0.3", "print", "1"
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    # The descendant that left the group held the output pipes open: it was not waited for
    # (it sleeps 60 s; the bound is generous for a loaded machine, far below that).
    assert time.monotonic() - started < 30.0
    pids = wait_for_pids(pids_file, "grandchild", "escaped", "hidden", timeout=0)
    assert wait_gone(pids, 2.0) == []


async def test_a_killed_launcher_still_takes_the_tree_with_it(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    where = str(pids_file)
    result = await run_agent("pid", where, "grandchild", where, "sleep", "0.2", "kill-parent")
    assert result.end is AttemptEnd.FAILED
    assert (result.error or "").startswith("the agent sandbox ended without a status")
    assert "SIGKILL" in (result.error or "")
    pids = wait_for_pids(pids_file, "agent", "grandchild", timeout=0)
    assert wait_gone(pids, 1.0) == []


def test_agent_tree_dies_with_a_worker_killed_by_sigkill(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    settings = agent_settings(*stubborn_tree(pids_file), isolation="none")
    config = {
        "settings": settings.model_dump(),
        "workdir_root": str(tmp_path / "runs"),
        "deadline_secs": 60,
    }
    worker = subprocess.Popen(
        [sys.executable, str(HOST), json.dumps(config)], stdout=subprocess.DEVNULL
    )
    try:
        pids = wait_for_pids(pids_file, *TREE, timeout=20)
        assert pids["launcher"] != worker.pid
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(5)
        left = wait_gone(pids, 2.0)
        assert left == [], f"outlived their worker: {left}"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
