"""Fixtures for the command agent tests: each runs real subprocesses under a temporary root."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from agent_harness import RunAgent, agent_settings, control, make_task

from agentqueue.domain.models import Task
from agentqueue.executors.base import AttemptControl, AttemptResult
from agentqueue.executors.isolation import resolve
from agentqueue.executors.subprocess import CommandAgent


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    """Where the attempts' working directories go."""
    return tmp_path / "runs"


@pytest.fixture(params=["cold", "warm"])
def run_agent(runs_root: Path, request: pytest.FixtureRequest) -> RunAgent:
    """Run one attempt of agent.py with ``actions``; keyword arguments are AgentSettings fields,
    plus ``task`` and ``control`` to pass your own. Under the ``host_processes`` mark the agent
    runs unsandboxed (the default is the bubblewrap sandbox). Each test runs twice: the attempt
    through a launcher started for it (cold), and through one started ahead and waiting (warm,
    as a worker runs attempts)."""
    host = request.node.get_closest_marker("host_processes") is not None
    warm = request.param == "warm"

    async def run(
        *actions: str,
        task: Task | None = None,
        control_: AttemptControl | None = None,
        **overrides: Any,
    ) -> AttemptResult:
        if host:
            # Unsandboxed and as this process's user: the agent writes the test's files.
            overrides.setdefault("isolation", "none")
            settings = agent_settings(*actions, **overrides)
            confinement = resolve("test-agent", settings, user=None)[0]
            agent = CommandAgent(
                "test-agent", settings, runs_root, confinement=confinement, warm=warm
            )
        else:
            settings = agent_settings(*actions, **overrides)
            agent = CommandAgent("test-agent", settings, runs_root, warm=warm)
        try:
            ctl = control_ or control()
            if warm:
                began = time.monotonic()
                assert await agent.warm_up() > 0, "no launcher was started ahead"
                # The test's deadline counts from its call, not from the warm-up.
                ctl.deadline += time.monotonic() - began
            return await agent.run(task or make_task(), ctl)
        finally:
            agent.close()

    return run
