"""Exit codes map to outcomes; nothing the agent does makes the executor raise."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_harness import RunAgent, agent_settings, control, make_task

from agentqueue.executors.base import AttemptEnd
from agentqueue.executors.subprocess import CommandAgent


async def test_exit_zero_completes(run_agent: RunAgent) -> None:
    result = await run_agent("print", '"ok"')
    assert (result.end, result.result, result.error) == (AttemptEnd.COMPLETED, "ok", None)


async def test_other_exit_code_fails_for_good_with_the_stderr_tail(run_agent: RunAgent) -> None:
    actions = [f"eprint line {n}" for n in range(20)]
    args = [part for a in actions for part in ("eprint", a.removeprefix("eprint "))]
    result = await run_agent(*args, "eprint", "fatal: repository not found", "exit", "3")
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    error = result.error or ""
    assert error.startswith("exit code 3")
    assert "fatal: repository not found" in error
    assert "line 0\n" not in error  # only the last lines, kept short
    assert len(error) < 700


async def test_retryable_exit_code_75_fails_retryably(run_agent: RunAgent) -> None:
    result = await run_agent("eprint", "rate limited", "exit", "75")
    assert result.end is AttemptEnd.FAILED
    assert result.retryable
    assert (result.error or "").startswith("exit code 75")


async def test_configured_exit_codes_are_honoured(run_agent: RunAgent) -> None:
    done = await run_agent("print", "1", "exit", "2", success_exit_codes=[0, 2])
    assert (done.end, done.result) == (AttemptEnd.COMPLETED, 1)
    retry = await run_agent("exit", "42", retryable_exit_codes=[42])
    assert (retry.end, retry.retryable) == (AttemptEnd.FAILED, True)
    fatal = await run_agent("exit", "75", retryable_exit_codes=[42])
    assert (fatal.end, fatal.retryable) == (AttemptEnd.FAILED, False)
    zero = await run_agent("exit", "0", success_exit_codes=[2])
    assert (zero.end, zero.error) == (AttemptEnd.FAILED, "exit code 0")


async def test_killed_by_a_signal_we_did_not_send_fails_naming_it(run_agent: RunAgent) -> None:
    result = await run_agent("kill-self", "SIGSEGV")
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert "SIGSEGV" in (result.error or "")


async def test_missing_executable_fails_for_good_without_raising(runs_root: Path) -> None:
    agent = CommandAgent(
        "ghost", agent_settings(command=["/nonexistent/agent-binary", "--x"]), runs_root
    )
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert result.error == "cannot start '/nonexistent/agent-binary': No such file or directory"


async def test_command_not_on_path_fails_for_good(runs_root: Path) -> None:
    agent = CommandAgent("ghost", agent_settings(command=["no-such-agent-cmd"]), runs_root)
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.FAILED
    assert "cannot start 'no-such-agent-cmd'" in (result.error or "")


async def test_relative_program_path_means_the_workers_directory(
    runs_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "agent.sh"
    script.write_text("#!/bin/sh\necho '\"relative ok\"'\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    agent = CommandAgent("rel", agent_settings(command=["./bin/agent.sh"]), runs_root)
    result = await agent.run(make_task(), control())
    assert (result.end, result.result) == (AttemptEnd.COMPLETED, "relative ok"), result.error


async def test_non_executable_command_fails_for_good(tmp_path: Path, runs_root: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho 1\n")
    script.chmod(0o644)
    agent = CommandAgent("noexec", agent_settings(command=[str(script)]), runs_root)
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert "Permission denied" in (result.error or "")


async def test_unusable_workdir_root_fails_retryably_without_raising(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    agent = CommandAgent("a", agent_settings("print", "1"), not_a_dir)
    result = await agent.run(make_task(), control())
    assert result.end is AttemptEnd.FAILED
    assert result.retryable
    assert "working directory" in (result.error or "")
