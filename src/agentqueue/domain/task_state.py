"""The states a task can be in (SPEC section 2); which changes between them are allowed is
decided in :mod:`agentqueue.domain.states`."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Where a task is in its life."""

    PENDING = "pending"
    BLOCKED = "blocked"
    QUEUED = "queued"
    EXECUTING = "executing"
    WAITING_TOOL = "waiting_tool"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    MANUAL_REVIEW = "manual_review"
    ARCHIVED = "archived"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Completed, failed, cancelled and archived tasks never change again."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED, TaskState.ARCHIVED}
)
LIVE_STATES = frozenset(s for s in TaskState if s not in TERMINAL_STATES)
