"""Builders and process checks shared by the command agent tests."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

from agentqueue.config import AgentSettings
from agentqueue.domain.models import Task
from agentqueue.domain.states import TaskState
from agentqueue.executors.base import AttemptControl, AttemptResult

HERE = Path(__file__).parent
AGENT = HERE / "agent.py"
HOST = HERE / "host.py"
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

RunAgent = Callable[..., Coroutine[Any, Any, AttemptResult]]
"""The ``run_agent`` fixture: ``await run_agent(*actions, task=, control_=, **settings)``."""


def make_task(**overrides: Any) -> Task:
    """An executing task with a fresh id."""
    fields: dict[str, Any] = {
        "id": uuid4(),
        "tenant": "acme",
        "source": "api",
        "source_id": None,
        "title": "Fix the login bug",
        "task_type": "bugfix",
        "payload": {"issue": 12, "text": "héllo"},
        "priority": 5,
        "state": TaskState.EXECUTING,
        "max_retries": 3,
        "retry_count": 0,
        "timeout_secs": 120,
        "created_at": START,
        "updated_at": START,
        "eligible_at": START,
        "requested_by": "api",
    }
    fields.update(overrides)
    return Task(**fields)


def agent_settings(*actions: str, **overrides: Any) -> AgentSettings:
    """Settings running agent.py with ``actions``; ``overrides`` are AgentSettings fields."""
    fields: dict[str, Any] = {
        "command": [sys.executable, str(AGENT), *actions],
        "task_types": ["bugfix"],
    }
    fields.update(overrides)
    return AgentSettings(**fields)


def control(deadline_secs: float = 20.0, **fields: Any) -> AttemptControl:
    """An attempt control whose deadline is ``deadline_secs`` from now."""
    return AttemptControl(deadline=time.monotonic() + deadline_secs, **fields)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has finished: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for_pids(path: Path, *names: str, timeout: float = 10.0) -> dict[str, int]:
    """The pids the agent recorded in ``path`` once all of ``names`` are there."""
    end = time.monotonic() + timeout
    while True:
        pids: dict[str, int] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                name, _, pid = line.partition(" ")
                if pid:
                    pids[name] = int(pid)
        if all(n in pids for n in names):
            return pids
        if time.monotonic() > end:
            raise AssertionError(f"the agent did not record {names} in {path}: {pids}")
        time.sleep(0.02)


def wait_gone(pids: dict[str, int], timeout: float) -> list[str]:
    """Wait up to ``timeout`` for every pid to end; the names of those still alive."""
    end = time.monotonic() + timeout
    while True:
        left = [name for name, pid in pids.items() if alive(pid)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.02)


def env_without(*names: str) -> dict[str, str]:
    """A copy of this process's environment without ``names``."""
    return {k: v for k, v in os.environ.items() if k not in names}


def entries(path: Path) -> list[Path]:
    """What a directory holds ([] when it does not exist)."""
    return sorted(path.iterdir()) if path.is_dir() else []


def real(path: Path | str) -> Path:
    """``path`` with symlinks resolved."""
    return Path(path).resolve()


def exists(path: Path | str) -> bool:
    """Whether ``path`` exists."""
    return Path(path).exists()
