"""Turning tasks and events into column values and rows back into tasks, for both dialects.

The dialects differ only in how a value is represented (PostgreSQL takes datetimes, UUIDs and
arrays natively; SQLite keeps microseconds, text and JSON text), so each passes a :class:`Codec`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from ..domain.audit import StoredEvent, data_text
from ..domain.models import Event, LogRecord, Task
from ..domain.states import TaskState
from .base import Change, NewTask, TaskHead


class Row(Protocol):
    """A result row read by column name (a dict, or a sqlite3.Row)."""

    def __getitem__(self, key: str) -> Any: ...


def _same(value: Any) -> Any:
    return value


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class Codec:
    """How one dialect writes and reads times, UUIDs, UUID lists and JSON."""

    time_out: Callable[[datetime | None], Any] = _same
    time_in: Callable[[Any], datetime | None] = _same
    uuid_out: Callable[[UUID | None], Any] = _same
    uuid_in: Callable[[Any], UUID | None] = _same
    uuids_out: Callable[[Sequence[UUID]], Any] = _same
    uuids_in: Callable[[Any], tuple[UUID, ...]] = tuple
    json_out: Callable[[Any], Any] = _json_text
    json_in: Callable[[Any], Any] = _same


TASK_INSERT_FIELDS = (
    "id", "tenant", "source", "source_id", "title", "task_type", "payload", "priority", "state",
    "max_retries", "timeout_secs", "assignee", "depends_on", "idempotency_key", "callback_url",
    "requested_by", "run_after", "eligible_at", "created_at", "event_seq", "last_hash",
)  # fmt: skip

MUTABLE_FIELDS = (
    "state", "state_reason", "priority", "retry_count", "lock_token", "locked_at",
    "heartbeat_at", "lease_expires_at", "assignee", "assigned_to", "checkpoint", "tool_calls",
    "result", "error", "approved_by", "run_after", "eligible_at", "started_at", "finished_at",
    "updated_at", "event_seq", "last_hash",
)  # fmt: skip
"""Columns a change may set; everything else is fixed at submit."""

_TIME_FIELDS = frozenset(
    {"locked_at", "heartbeat_at", "lease_expires_at", "run_after", "eligible_at", "started_at",
     "finished_at", "updated_at", "created_at"}
)  # fmt: skip
_JSON_FIELDS = frozenset({"payload", "checkpoint", "result"})


def _encode(task: Task, name: str, codec: Codec) -> Any:
    value = getattr(task, name)
    if name in _TIME_FIELDS:
        return codec.time_out(value)
    if name in _JSON_FIELDS:
        return codec.json_out(value)
    if name == "tool_calls":
        return codec.json_out(list(value))
    if name in ("id", "lock_token"):
        return codec.uuid_out(value)
    if name == "depends_on":
        return codec.uuids_out(value)
    if name == "state":
        return value.value
    return value


def new_task_columns(new: Sequence[NewTask], codec: Codec) -> dict[str, list[Any]]:
    """One list per insert column."""
    return {name: [_encode(n.task, name, codec) for n in new] for name in TASK_INSERT_FIELDS}


def change_columns(changes: Sequence[Change], codec: Codec) -> dict[str, list[Any]]:
    """One list per mutable column, plus the guard columns."""
    cols: dict[str, list[Any]] = {
        "id": [codec.uuid_out(c.task.id) for c in changes],
        "expected_state": [c.expected_state.value for c in changes],
        "expected_seq": [c.expected_event_seq for c in changes],
    }
    for name in MUTABLE_FIELDS:
        cols[name] = [_encode(c.task, name, codec) for c in changes]
    return cols


def event_columns(events: Sequence[Event], codec: Codec) -> dict[str, list[Any]]:
    """One list per event column, named ``e_*``."""
    return {
        "e_task_id": [codec.uuid_out(e.task_id) for e in events],
        "e_seq": [e.seq for e in events],
        "e_tenant": [e.tenant for e in events],
        "e_at": [codec.time_out(e.at) for e in events],
        "e_from": [e.from_state.value if e.from_state else None for e in events],
        "e_to": [e.to_state.value for e in events],
        "e_action": [e.action for e in events],
        "e_actor": [e.actor for e in events],
        "e_reason": [e.reason for e in events],
        "e_data": [data_text(e.data) for e in events],
        "e_hash": [e.hash for e in events],
    }


def log_columns(records: Sequence[LogRecord], codec: Codec) -> dict[str, list[Any]]:
    """One list per aq_task_logs column."""
    return {
        "task_id": [codec.uuid_out(r.task_id) for r in records],
        "tenant": [r.tenant for r in records],
        "attempt": [r.attempt for r in records],
        "stream": [r.stream for r in records],
        "at": [codec.time_out(r.at) for r in records],
        "text": [r.text for r in records],
        "truncated": [r.truncated for r in records],
    }


def log_from_row(row: Row, codec: Codec) -> LogRecord:
    """A LogRecord from a row of aq_task_logs."""
    return LogRecord(
        task_id=codec.uuid_in(row["task_id"]),  # type: ignore[arg-type]
        tenant=row["tenant"],
        attempt=row["attempt"],
        stream=row["stream"],
        at=codec.time_in(row["at"]),  # type: ignore[arg-type]
        text=row["text"],
        truncated=bool(row["truncated"]),
    )


def rows_of(columns: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Columns turned into one parameter dict per row."""
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def task_from_row(row: Row, codec: Codec) -> Task:
    """A Task from a row of aq_tasks."""
    time_in = codec.time_in
    return Task(
        id=codec.uuid_in(row["id"]),  # type: ignore[arg-type]
        seq=row["seq"],
        tenant=row["tenant"],
        source=row["source"],
        source_id=row["source_id"],
        title=row["title"],
        task_type=row["task_type"],
        payload=codec.json_in(row["payload"]),
        priority=row["priority"],
        state=TaskState(row["state"]),
        state_reason=row["state_reason"],
        max_retries=row["max_retries"],
        retry_count=row["retry_count"],
        timeout_secs=row["timeout_secs"],
        lock_token=codec.uuid_in(row["lock_token"]),
        locked_at=time_in(row["locked_at"]),
        heartbeat_at=time_in(row["heartbeat_at"]),
        lease_expires_at=time_in(row["lease_expires_at"]),
        assignee=row["assignee"],
        assigned_to=row["assigned_to"],
        depends_on=codec.uuids_in(row["depends_on"]),
        idempotency_key=row["idempotency_key"],
        callback_url=row["callback_url"],
        checkpoint=codec.json_in(row["checkpoint"]),
        tool_calls=tuple(codec.json_in(row["tool_calls"]) or ()),
        result=codec.json_in(row["result"]),
        error=row["error"],
        requested_by=row["requested_by"],
        approved_by=row["approved_by"],
        run_after=time_in(row["run_after"]),
        eligible_at=time_in(row["eligible_at"]),  # type: ignore[arg-type]
        created_at=time_in(row["created_at"]),  # type: ignore[arg-type]
        updated_at=time_in(row["updated_at"]),  # type: ignore[arg-type]
        started_at=time_in(row["started_at"]),
        finished_at=time_in(row["finished_at"]),
        event_seq=row["event_seq"],
        last_hash=row["last_hash"],
    )


def stored_event_from_row(row: Row, codec: Codec) -> StoredEvent:
    """An event exactly as stored (``data`` as text), for verification."""
    return StoredEvent(
        task_id=codec.uuid_in(row["task_id"]),  # type: ignore[arg-type]
        tenant=row["tenant"],
        seq=row["seq"],
        at=codec.time_in(row["at"]),  # type: ignore[arg-type]
        from_state=row["from_state"],
        to_state=row["to_state"],
        action=row["action"],
        actor=row["actor"],
        reason=row["reason"],
        data_text=row["data"],
        hash=row["hash"],
    )


def task_head_from_row(row: Row, codec: Codec) -> TaskHead:
    """The audit head recorded on a task row."""
    return TaskHead(
        codec.uuid_in(row["id"]),  # type: ignore[arg-type]
        row["tenant"],
        row["event_seq"],
        row["last_hash"],
        row["state"],
    )


def event_from_row(row: Row, codec: Codec) -> Event:
    """An Event from a row of aq_events (``data`` as stored text)."""
    return Event(
        task_id=codec.uuid_in(row["task_id"]),  # type: ignore[arg-type]
        tenant=row["tenant"],
        seq=row["seq"],
        at=codec.time_in(row["at"]),  # type: ignore[arg-type]
        from_state=TaskState(row["from_state"]) if row["from_state"] else None,
        to_state=TaskState(row["to_state"]),
        action=row["action"],
        actor=row["actor"],
        reason=row["reason"],
        data=json.loads(row["data"]),
        hash=row["hash"],
    )
