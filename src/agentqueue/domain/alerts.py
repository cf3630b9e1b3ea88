"""Dead-letter alerts (R8): which changes raise one, and what it says.

A P0 task entering dead_letter, by whatever path (an attempt failed with no retries left, a
lapsed lease taken back with none left, a tool timeout, retries exhausted), raises exactly one
alert: keyed by the task and the position of that change in its audit chain, so writing the
same change twice can never raise two.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from .delivery_kinds import ALERT_KIND as ALERT_KIND  # the name stays importable from here
from .models import Event, Task
from .priority import MIN_PRIORITY
from .states import TaskState

MAX_BACKOFF_SECS = 300.0


@dataclass(frozen=True)
class Alert:
    """One alert to deliver: about ``task_id`` at audit position ``event_seq``."""

    task_id: UUID
    tenant: str
    event_seq: int
    at: datetime
    body: dict[str, Any]


def dead_letter_alert(task: Task, event: Event) -> Alert | None:
    """The alert ``event`` raises on ``task`` (the task as the event left it), if any: only a
    P0 task coming into dead_letter raises one."""
    if task.priority != MIN_PRIORITY:
        return None
    if event.to_state is not TaskState.DEAD_LETTER or event.from_state is TaskState.DEAD_LETTER:
        return None
    # The error goes to people (a webhook, a log): anything in it that looks like a credential
    # is masked on the way.
    error = redact(task.error or task.state_reason or event.reason)
    body = {
        "event": "task.dead_letter",
        "task_id": str(task.id),
        "tenant": task.tenant,
        "title": task.title,
        "task_type": task.task_type,
        "priority": task.priority,
        "error": error,
        "retry_count": task.retry_count,
        "dead_lettered_at": event.at.isoformat(),
    }
    return Alert(task.id, task.tenant, event.seq, event.at, body)


def alert_backoff_secs(attempts: int) -> float:
    """Seconds before the next try after ``attempts`` failed ones: min(2^n, 300). Alerts are
    retried until delivered."""
    return min(2.0 ** min(attempts, 16), MAX_BACKOFF_SECS)


_URL_SECRET = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:[^\s/@]*@)?([^\s?#]*)(?:[?#]\S*)?")
_KEY_VALUE_SECRET = re.compile(
    r"(?i)([a-z0-9_-]*(?:token|secret|password|passwd|api[_-]?key|authorization))"
    r"([\"']?\s*[=:]\s*[\"']?)[^\s\"',;&]+"
)
_BEARER_SECRET = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str) -> str:
    """``text`` with what commonly carries a secret masked: URL credentials, query strings and
    fragments, ``token=...``-style values and bearer tokens. For log lines, alert bodies and
    recorded delivery errors."""
    text = _URL_SECRET.sub(lambda m: m.group(1) + m.group(2), text)
    text = _BEARER_SECRET.sub(lambda m: f"{m.group(1)}***", text)
    return _KEY_VALUE_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
