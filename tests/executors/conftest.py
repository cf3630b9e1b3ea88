"""Fixtures for the command agent tests: each runs real subprocesses under a temporary root."""

from __future__ import annotations

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


@pytest.fixture
def run_agent(runs_root: Path, request: pytest.FixtureRequest) -> RunAgent:
    """Run one attempt of agent.py with ``actions``; keyword arguments are AgentSettings fields,
    plus ``task`` and ``control`` to pass your own. Under the ``host_processes`` mark the agent
    runs unsandboxed (the default is the bubblewrap sandbox)."""
    host = request.node.get_closest_marker("host_processes") is not None

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
            agent = CommandAgent("test-agent", settings, runs_root, confinement=confinement)
        else:
            agent = CommandAgent("test-agent", agent_settings(*actions, **overrides), runs_root)
        return await agent.run(task or make_task(), control_ or control())

    return run
