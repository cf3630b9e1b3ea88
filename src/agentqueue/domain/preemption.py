"""Preemption (R11): which running task yields its slot to a queued P0 task."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime

from .models import Task


def could_run(
    task_types: Collection[str],
    agents: Collection[str],
    wanted: Iterable[tuple[str | None, str]],
) -> bool:
    """Whether an executor serving ``task_types`` and ``agents`` could run one of the ``wanted``
    tasks, each given as (agent it is routed to or None, task type)."""
    return any(
        agent in agents if agent is not None else task_type in task_types
        for agent, task_type in wanted
    )


def preemption_victim(
    running: Sequence[Task], now: datetime, min_priority: int, after_secs: float
) -> Task | None:
    """Of the tasks running in one full executor, the one to ask to yield: of priority at least
    ``min_priority`` (a larger number is less urgent), started more than ``after_secs`` ago;
    the least urgent first, then the longest running. None if no task qualifies."""
    candidates = [
        task
        for task in running
        if task.priority >= min_priority
        and task.started_at is not None
        and (now - task.started_at).total_seconds() > after_secs
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda t: (-t.priority, t.started_at))
