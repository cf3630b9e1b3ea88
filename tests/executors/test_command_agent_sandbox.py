"""R16: each attempt runs in its own working directory with a scrubbed environment and sees only
its own task."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from uuid import uuid4

import pytest
from agent_harness import RunAgent, agent_settings, control, entries, exists, make_task, real

from agentqueue.executors.base import AttemptEnd
from agentqueue.executors.subprocess import CommandAgent, agent_view


@pytest.mark.host_processes
async def test_agent_runs_in_its_own_session_and_process_group(run_agent: RunAgent) -> None:
    result = await run_agent("ids")
    ids = result.result
    # The launcher (the agent's parent) leads a new session and group holding the agent.
    assert ids["pgid"] == ids["sid"] == ids["ppid"]
    assert ids["pgid"] not in (os.getpgrp(), os.getpid())
    assert os.getsid(0) != ids["sid"]


async def test_agent_gets_the_task_on_stdin_and_in_task_json(run_agent: RunAgent) -> None:
    task = make_task(payload={"issue": 7, "text": "naïve ✓"}, retry_count=2)
    result = await run_agent("task", task=task)
    assert result.end is AttemptEnd.COMPLETED, result.error
    expected = json.loads(json.dumps(agent_view(task)))
    assert result.result["stdin"] == expected
    assert result.result["file"] == expected
    assert expected["payload"] == {"issue": 7, "text": "naïve ✓"} and expected["retry_count"] == 2


async def test_the_agent_never_sees_the_lease_token(run_agent: RunAgent) -> None:
    task = make_task(payload={"issue": 7}, lock_token=uuid4())
    result = await run_agent("task", task=task)
    assert result.end is AttemptEnd.COMPLETED, result.error
    for seen in (result.result["stdin"], result.result["file"]):
        assert "lock_token" not in seen
    for log in result.logs:
        assert str(task.lock_token) not in log.text


async def test_each_attempt_runs_in_a_fresh_workdir_named_for_task_and_attempt(
    run_agent: RunAgent, runs_root: Path
) -> None:
    task = make_task(retry_count=2)
    first = await run_agent("task", task=task)
    second = await run_agent("task", task=task)
    cwd1, cwd2 = Path(first.result["cwd"]), Path(second.result["cwd"])
    assert cwd1 != cwd2
    for cwd in (cwd1, cwd2):
        assert cwd.parent == real(runs_root)
        assert re.fullmatch(rf"{task.id}-3-[A-Za-z0-9_]+", cwd.name)


async def test_workdir_is_removed_after_the_attempt(run_agent: RunAgent, runs_root: Path) -> None:
    result = await run_agent("task", "exit", "3")
    assert result.end is AttemptEnd.FAILED
    assert entries(runs_root) == []
    done = await run_agent("task")
    assert not exists(done.result["cwd"])


async def test_workdir_is_removed_even_when_the_agent_made_it_read_only(
    run_agent: RunAgent, runs_root: Path
) -> None:
    script = "mkdir -p locked/inner && touch locked/inner/f && chmod 500 locked/inner locked"
    agent = CommandAgent(
        "sh-agent",
        agent_settings(command=["/bin/sh", "-c", script]),
        runs_root,
    )
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert entries(runs_root) == []


async def test_keep_workdir_keeps_it(run_agent: RunAgent, runs_root: Path) -> None:
    result = await run_agent("result", '{"ok": true}', keep_workdir=True)
    assert result.result == {"ok": True}
    kept = entries(runs_root)
    assert len(kept) == 1
    assert json.loads((kept[0] / "task.json").read_text())["tenant"] == "acme"
    assert (kept[0] / "result.json").read_text() == '{"ok": true}'


async def test_settings_workdir_overrides_the_root(tmp_path: Path, runs_root: Path) -> None:
    own = tmp_path / "own-root"
    agent = CommandAgent("a", agent_settings("task", workdir=str(own)), runs_root)
    result = await agent.run(make_task(), control())
    assert Path(result.result["cwd"]).parent == real(own)
    assert entries(runs_root) == []


async def test_environment_is_scrubbed_to_the_documented_variables(
    run_agent: RunAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTQUEUE_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    monkeypatch.setenv("ALLOWED_TOKEN", "visible")
    monkeypatch.delenv("ALLOWED_BUT_UNSET", raising=False)
    task = make_task(retry_count=1)
    result = await run_agent("env", task=task, env=["ALLOWED_TOKEN", "ALLOWED_BUT_UNSET"])
    assert result.end is AttemptEnd.COMPLETED, result.error
    env = result.result
    workdir = env["AGENTQUEUE_WORKDIR"]
    assert env == {
        "PATH": os.environ["PATH"],
        "HOME": env["HOME"],
        "TMPDIR": env["TMPDIR"],
        "LANG": "C.UTF-8",
        "AGENTQUEUE_TASK_ID": str(task.id),
        "AGENTQUEUE_TENANT": "acme",
        "AGENTQUEUE_TASK_TYPE": "bugfix",
        "AGENTQUEUE_ATTEMPT": "2",
        "AGENTQUEUE_TASK_FILE": f"{workdir}/task.json",
        "AGENTQUEUE_RESULT_FILE": f"{workdir}/result.json",
        "AGENTQUEUE_CHECKPOINT": f"{workdir}/checkpoint.json",
        "AGENTQUEUE_TOOL_RESULTS": f"{workdir}/tool_results.json",
        "AGENTQUEUE_WORKDIR": workdir,
        "ALLOWED_TOKEN": "visible",
    }
    assert env["HOME"].startswith(workdir + "/")
    assert env["TMPDIR"].startswith(workdir + "/")
    assert "hunter2" not in json.dumps(result.logs[0].text)


async def test_home_and_tmpdir_exist_and_are_writable(runs_root: Path) -> None:
    script = 'touch "$HOME/h" "$TMPDIR/t" && printf \'"%s"\\n\' "$PWD"'
    agent = CommandAgent("sh", agent_settings(command=["/bin/sh", "-c", script]), runs_root)
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert Path(result.result).parent == real(runs_root)


async def test_concurrent_attempts_each_see_only_their_own_task(runs_root: Path) -> None:
    agent = CommandAgent("a", agent_settings("sleep", "0.2", "task", max_concurrent=3), runs_root)
    tasks = [make_task(tenant=f"tenant-{n}", payload={"secret": f"payload-{n}"}) for n in range(3)]
    results = await asyncio.gather(*(agent.run(t, control()) for t in tasks))
    for task, result in zip(tasks, results, strict=True):
        assert result.end is AttemptEnd.COMPLETED, result.error
        for seen in (result.result["stdin"], result.result["file"]):
            assert seen["id"] == str(task.id)
            assert seen["tenant"] == task.tenant
            assert seen["payload"] == task.payload


async def test_an_agent_that_never_reads_a_large_stdin_still_completes(
    run_agent: RunAgent,
) -> None:
    task = make_task(payload={"blob": "x" * (1024 * 1024)})
    result = await run_agent("print", '"done"', task=task, control_=control(10))
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == "done"


def test_executor_shape() -> None:
    agent = CommandAgent(
        "coder",
        agent_settings(task_types=["bugfix", "review"], max_concurrent=4),
        Path("relative/runs"),
    )
    assert agent.name == "coder"
    assert agent.task_types == frozenset({"bugfix", "review"})
    assert agent.max_concurrent == 4
    assert agent.workdir_root.is_absolute()
