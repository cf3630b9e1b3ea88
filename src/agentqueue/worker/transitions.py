"""One log line per task transition the worker made, written once the transition is committed.

A claim (``queued -> executing``) is logged as the claim returns; an outcome (``executing ->
completed``, ``retrying``, ``dead_letter``, ...) once its batch is recorded, so a line never
tells of a change the database does not hold. Each line carries the fields ``task_id``,
``task_type``, ``agent``, ``attempt``, ``from``, ``to`` and ``duration_ms`` (for a claim: how long
the task waited since it could run; for an outcome: from the claim to the recorded outcome), plus
``error`` and ``traceback`` when the attempt failed. The level is checked first: with INFO off a
line costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from ..domain.models import Task
from ..domain.states import Refusal
from ..service.execution import Outcome

log = logging.getLogger("agentqueue.worker.transitions")

_INFO = logging.INFO


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 1)


def _line(task: Task, attempt: int, before: str, after: str, duration: float | None,
          error: str | None = None, trace: str | None = None) -> None:  # fmt: skip
    fields = {
        "task_id": str(task.id),
        "task_type": task.task_type,
        "agent": task.agent,
        "attempt": attempt,
        "from": before,
        "to": after,
        "duration_ms": duration,
    }
    if error:
        fields["error"] = error
    if trace:
        fields["traceback"] = trace
    log.info(
        "task %s %s attempt %d: %s -> %s (%s ms)%s",
        task.id, task.task_type, attempt, before, after, duration,
        f": {error}" if error else "", extra=fields,
    )  # fmt: skip


def claimed(task: Task) -> None:
    """A claim of ``task`` was committed."""
    if not log.isEnabledFor(_INFO):
        return
    _line(task, task.retry_count + 1, "queued", task.state.value,
          _ms(task.eligible_at, task.locked_at))  # fmt: skip


def recorded(batch: Sequence[Outcome], done: Mapping[UUID, Task | Refusal]) -> None:
    """Outcomes were committed; ``done`` holds each task as left (refusals are not
    transitions: the flusher says so itself)."""
    if not log.isEnabledFor(_INFO):
        return
    for outcome in batch:
        claimed_task = outcome.claimed
        answer = done.get(outcome.task_id)
        if claimed_task is None or answer is None or isinstance(answer, Refusal):
            continue
        _line(
            answer,
            claimed_task.retry_count + 1,
            claimed_task.state.value,
            answer.state.value,
            _ms(claimed_task.locked_at, answer.updated_at),
            outcome.error,
            outcome.traceback,
        )
