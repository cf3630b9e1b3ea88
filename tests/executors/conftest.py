"""Fixtures for the command agent tests: each runs real subprocesses under a temporary root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_harness import RunAgent, agent_settings, control, make_task

from agentqueue.domain.models import Task
from agentqueue.executors.base import AttemptControl, AttemptResult
from agentqueue.executors.subprocess import CommandAgent


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    """Where the attempts' working directories go."""
    return tmp_path / "runs"


@pytest.fixture
def run_agent(runs_root: Path) -> RunAgent:
    """Run one attempt of agent.py with ``actions``; keyword arguments are AgentSettings fields,
    plus ``task`` and ``control`` to pass your own."""

    async def run(
        *actions: str,
        task: Task | None = None,
        control_: AttemptControl | None = None,
        **overrides: Any,
    ) -> AttemptResult:
        agent = CommandAgent("test-agent", agent_settings(*actions, **overrides), runs_root)
        return await agent.run(task or make_task(), control_ or control())

    return run
