"""One log line per task transition the worker made, written once the transition is committed.

A claim (``queued -> executing``) is logged as the claim returns; an outcome (``executing ->
completed``, ``retrying``, ``dead_letter``, ...) once its batch is recorded, so a line never
tells of a change the database does not hold. Each line carries the fields ``task_id``,
``task_type``, ``agent``, ``attempt``, ``from``, ``to`` and ``duration_ms`` (for a claim: how long
the task waited since it could run; for an outcome: from the claim to the recorded outcome), plus
``error`` and ``traceback`` when the attempt failed.

The worker claims and records in batches, and so does this: a batch is one log record (the
level checked once), whose formatter writes one line per transition (see
``logsetup.TRANSITIONS``). A record costs tens of microseconds, a line a few: measured by
``agentqueue bench drain`` (README, Logs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ..domain.models import Task
from ..domain.states import Refusal
from ..domain.task_state import TaskState
from ..logsetup import TRANSITIONS, transition_text
from ..service.execution import Outcome

log = logging.getLogger("agentqueue.worker.transitions")

_INFO = logging.INFO


_STATE_TEXT = {state: state.value for state in TaskState}
"""Each state's name as a plain string (a dict lookup: cheaper than ``.value`` per line)."""
_ONE_MS = timedelta(milliseconds=1)


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start) / _ONE_MS, 1)


class _Text:
    """A batch's lines as text, built only when a formatter asks for the message."""

    __slots__ = ("items",)

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __str__(self) -> str:
        return "\n".join(transition_text(item) for item in self.items)


def _emit(items: list[dict[str, Any]]) -> None:
    if items:
        log.info(_Text(items), extra={TRANSITIONS: items})


def claimed(tasks: Iterable[Task]) -> None:
    """Claims of ``tasks`` were committed."""
    if not log.isEnabledFor(_INFO):
        return
    _emit(
        [
            {
                "task_id": task.id_text,
                "task_type": task.task_type,
                "agent": task.agent,
                "attempt": task.retry_count + 1,
                "from": "queued",
                "to": _STATE_TEXT[task.state],
                "duration_ms": _ms(task.eligible_at, task.locked_at),
            }
            for task in tasks
        ]
    )


def recorded(batch: Sequence[Outcome], done: Mapping[UUID, Task | Refusal]) -> None:
    """Outcomes were committed; ``done`` holds each task as left (refusals are not
    transitions: the flusher says so itself)."""
    if not log.isEnabledFor(_INFO):
        return
    items = []
    for outcome in batch:
        before = outcome.claimed
        answer = done.get(outcome.task_id)
        if before is None or answer is None or isinstance(answer, Refusal):
            continue
        item = {
            "task_id": answer.id_text,
            "task_type": answer.task_type,
            "agent": answer.agent,
            "attempt": before.retry_count + 1,
            "from": _STATE_TEXT[before.state],
            "to": _STATE_TEXT[answer.state],
            "duration_ms": _ms(before.locked_at, answer.updated_at),
        }
        if outcome.error:
            item["error"] = outcome.error
        if outcome.traceback:
            item["traceback"] = outcome.traceback
        items.append(item)
    _emit(items)
