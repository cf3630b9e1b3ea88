"""The isolation settings: checked at load naming the field, a bubblewrap that cannot work is an
error when asked for and a loud warning when only defaulted, and working directories stay or go
per ``[worker] keep_workdirs``."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import AGENT, control, make_task

from agentqueue.config import load_settings
from agentqueue.domain.errors import ConfigError
from agentqueue.executors.base import AttemptEnd
from agentqueue.executors.isolation import Confinement, bwrap_command, bwrap_problem
from agentqueue.executors.subprocess import CommandAgent
from agentqueue.worker.assemble import build_executors


def write_config(tmp_path: Path, *lines: str) -> Path:
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        "\n".join(
            [
                "[worker]",
                f'workdir = "{tmp_path / "runs"}"',
                *[line for line in lines if line.startswith(("keep_workdirs", "run_as"))],
                "[agents.a]",
                f'command = ["{sys.executable}", "{AGENT}"]',
                'task_types = ["bugfix"]',
                *[line for line in lines if not line.startswith(("keep_workdirs", "run_as"))],
            ]
        )
        + "\n"
    )
    return config


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ('extra_ro = ["relative/path"]', "agents.a.extra_ro", "is not an absolute path"),
        ('extra_rw = ["/no/such/place"]', "agents.a.extra_rw", "does not exist"),
        ('isolation = "docker"', "agents.a.isolation", "'bwrap' or 'none'"),
        ('run_as = "no-such-user-here"', "worker.run_as", "no user named"),
        ('keep_workdirs = "sometimes"', "worker.keep_workdirs", "'never', 'failed' or 'always'"),
    ],
)
def test_bad_isolation_settings_name_the_field(
    tmp_path: Path, line: str, field: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, line))
    assert f"{field}: " in str(caught.value)
    assert says in str(caught.value)


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """bwrap cannot be found (PATH without it; the probe's memo cleared around the test)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    bwrap_problem.cache_clear()
    yield
    bwrap_problem.cache_clear()


def test_an_explicit_bwrap_that_cannot_work_is_a_start_error(
    tmp_path: Path, no_bwrap: None
) -> None:
    settings = load_settings(write_config(tmp_path, 'isolation = "bwrap"'))
    with pytest.raises(ConfigError) as caught:
        build_executors(settings, {}, concurrency=1)
    assert str(caught.value).startswith("agents.a.isolation: ")
    assert "bwrap is not installed" in str(caught.value)


def test_a_defaulted_bwrap_that_cannot_work_falls_back_with_a_warning(
    tmp_path: Path, no_bwrap: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(write_config(tmp_path))
    with caplog.at_level(logging.WARNING, logger="agentqueue.worker"):
        (agent,) = build_executors(settings, {}, concurrency=1)
    assert isinstance(agent, CommandAgent)
    assert agent.confinement.bwrap is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "WITHOUT isolation" in warnings[0] and "a (bwrap is not installed" in warnings[0]


def test_bwrap_is_the_default_where_it_works(tmp_path: Path) -> None:
    (agent,) = build_executors(load_settings(write_config(tmp_path)), {}, concurrency=1)
    assert isinstance(agent, CommandAgent)
    assert agent.confinement.bwrap is True


@pytest.mark.parametrize(
    ("keep", "kept_completed", "kept_failed"),
    [("never", False, False), ("failed", False, True), ("always", True, True)],
)
async def test_keep_workdirs_keeps_what_it_says(
    tmp_path: Path, keep: str, kept_completed: bool, kept_failed: bool
) -> None:
    settings = load_settings(write_config(tmp_path, f'keep_workdirs = "{keep}"'))
    (agent,) = build_executors(settings, {}, concurrency=1)
    assert isinstance(agent, CommandAgent)
    runs = tmp_path / "runs"
    done = make_task(title="completes")
    failed = make_task(title="fails")
    agent.command = [*agent.command, "print", "1"]
    assert (await agent.run(done, control())).end is AttemptEnd.COMPLETED
    agent.command = [*agent.command, "exit", "3"]
    assert (await agent.run(failed, control())).end is AttemptEnd.FAILED
    left = {p.name.split("-1-")[0] for p in runs.iterdir()}
    assert (str(done.id) in left) is kept_completed
    assert (str(failed.id) in left) is kept_failed


def test_an_interpreter_in_a_virtual_environment_under_tmp_runs_sandboxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox's /tmp is private, so a worker whose Python lives under /tmp (a CI's fresh
    virtual environment) binds its installation back, and the agent's command naming that
    python (a file under the place bound back) must not be bound a second time."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert str(venv).startswith("/tmp/"), venv
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    workdir = tmp_path / "runs" / "one"
    workdir.mkdir(parents=True)
    command = bwrap_command(
        Confinement(bwrap=True),
        [str(venv / "bin" / "python"), "-c", "import sys; print('ran in', sys.prefix)"],
        workdir=workdir,
        workdir_root=tmp_path / "runs",
        tmp_bytes=None,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ran in {venv}"
