"""The envelope and the payload kept apart (R25): the queue manages a task's envelope (its
identity, tenant, state, ownership, schedule, lease and approvals); an agent reads the payload
and writes its result, and nothing else.

A command agent's result is its own JSON value, kept as the task's ``result``. A result object
whose top-level keys name an envelope field (``{"priority": 0}``, ``{"assignee": "me"}``) reads
as an attempt to change the task, and is refused: the attempt fails saying which field, and the
task's fields stay as they were. Keys that name what the agent may speak of (``title``,
``payload``, ``result``, ``error``, ``checkpoint``) and any other key (a mail's ``reply``, a
``reply_id``) are its own.
"""

from __future__ import annotations

from typing import Any

from .models import Task

ENVELOPE_FIELDS = frozenset(
    {
        "id",
        "tenant",
        "source",
        "source_id",
        "task_type",
        "kind",
        "priority",
        "state",
        "state_reason",
        "hold",
        "max_retries",
        "retry_count",
        "timeout_secs",
        "requested_by",
        "assignee",
        "assigned_to",
        "agent",
        "labels",
        "depends_on",
        "run_after",
        "idempotency_key",
        "callback_url",
        "lock_token",
        "locked_at",
        "heartbeat_at",
        "lease_expires_at",
        "approved_by",
        "tool_calls",
        "tool_deadline_at",
        "traceparent",
        "in_reply_to",
        "seq",
        "event_seq",
        "last_hash",
        "created_at",
        "updated_at",
        "eligible_at",
        "started_at",
        "finished_at",
    }
)
"""The task's fields the queue alone manages: a result may not name one."""

AGENT_FIELDS = frozenset({"title", "payload", "result", "error", "checkpoint"})
"""The task's fields an agent's result may speak of: what the task says and what came of it
(only ``result`` is written from it; the others are never changed by a result either)."""


PRIVATE_FIELDS = ("lock_token", "locked_at", "heartbeat_at")
"""Never shown to an agent: the lease is the worker's, and only the worker writes with it."""


def agent_view(task: Task) -> dict[str, Any]:
    """The task as an agent sees it (``task.json``, and what a prompt template is given): its
    own fields, without the lease."""
    view = task.to_json()
    for private in PRIVATE_FIELDS:
        view.pop(private, None)
    return view


def envelope_problem(result: Any) -> str | None:
    """Why ``result`` cannot be taken as an agent's result (None: it can), naming the field."""
    if not isinstance(result, dict):
        return None
    named = sorted(key for key in result if key in ENVELOPE_FIELDS)
    if not named:
        return None
    others = f" (and {', '.join(named[1:])})" if len(named) > 1 else ""
    return (
        f"result.{named[0]}{others}: names a field the queue manages, not the agent; a result "
        "may set only the task's result (a mail's also its reply), so the task was left as it was"
    )
