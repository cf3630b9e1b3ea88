"""Builders of domain Tasks in any state, for the state machine tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from agentqueue.domain.models import Task
from agentqueue.domain.states import TaskState

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TASK_ID = UUID(int=1)
HOLDER_TOKEN = UUID(int=0xA11)
OTHER_TOKEN = UUID(int=0xB22)
WORKER = "worker-1"


AWAITED_CALL = {"id": "call-1", "name": "search", "args": {"q": "x"}, "state": "waiting",
                "result": None}  # fmt: skip
"""The tool call a task made with ``make_task(WAITING_TOOL)`` awaits."""


def wait_call(task: Task) -> dict[str, Any]:
    """A new tool call for ``task`` to wait on (a WAIT_TOOL request's ``tool_call``)."""
    return {"id": f"call-{len(task.tool_calls) + 1}", "name": "search", "args": {}}


def make_task(state: TaskState = TaskState.PENDING, **overrides: Any) -> Task:
    """A task in ``state``; an executing task holds a lease with HOLDER_TOKEN."""
    fields: dict[str, Any] = {
        "id": TASK_ID,
        "tenant": "default",
        "source": "api",
        "source_id": None,
        "title": "Fix the login bug",
        "task_type": "bugfix",
        "payload": {"issue": 12},
        "priority": 5,
        "state": state,
        "max_retries": 3,
        "retry_count": 0,
        "timeout_secs": 120,
        "created_at": START,
        "updated_at": START,
        "eligible_at": START,
        "requested_by": "api",
        "assignee": "coder",
    }
    if state is TaskState.EXECUTING:
        fields.update(
            lock_token=HOLDER_TOKEN,
            locked_at=START,
            heartbeat_at=START,
            lease_expires_at=START + timedelta(seconds=30),
            assigned_to=WORKER,
            started_at=START,
        )
    if state is TaskState.WAITING_TOOL:
        fields.update(tool_calls=(AWAITED_CALL,))
    fields.update(overrides)
    return Task(**fields)
