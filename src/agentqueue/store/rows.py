"""The one codec: statement parameters in, result rows out, for both dialects.

The dialects differ only in how a value is represented (PostgreSQL takes datetimes, UUIDs and
arrays natively; SQLite keeps microseconds, text and JSON text), so each passes a :class:`Codec`,
and every operation encodes its parameters and decodes its rows through it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from ..domain.access import Role
from ..domain.audit import Anchor, RowFields, StoredEvent, data_text
from ..domain.deliveries import Delivery, DeliveryAttempt, DeliveryRecord
from ..domain.models import Event, LogRecord, Task
from ..domain.schedule import CatchUp
from ..domain.states import TaskState
from .base import (
    Bucket,
    Change,
    DeliveryResult,
    LoadRow,
    NewTask,
    OutboxRow,
    Purge,
    Room,
    TaskHead,
)

R = TypeVar("R")


class Row(Protocol):
    """A result row read by column name (a dict, or a sqlite3.Row)."""

    def __getitem__(self, key: str) -> Any: ...


def _same(value: Any) -> Any:
    return value


_DECODE = json.JSONDecoder().decode


def load_json_text(text: str) -> Any:
    """A JSON column's text as a Python value, as ``json.loads`` gives it, only cheaper: every
    task row carries several JSON columns (payload, tool_calls, labels), mostly empty, so the
    empty array and object are made without a parse (a new one each time: never a value
    shared by rows), and any other text is decoded without ``json.loads``'s check of its
    encoding (both databases give text)."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return _DECODE(text)


def dump(value: Any) -> str:
    """JSON text as every bulk statement reads it (one document, one parameter per batch)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _seconds(name: str, secs: float) -> tuple[str, Any]:
    return f"{name}_secs", secs


@dataclass(frozen=True)
class Codec:
    """How one dialect carries times, UUIDs, lists, durations and JSON: as statement
    parameters (``*_param``), inside bulk JSON documents (``*_out``) and in result rows
    (``*_in``)."""

    time_out: Callable[[datetime], Any] = _same
    time_in: Callable[[Any], datetime | None] = _same
    uuid_out: Callable[[UUID], Any] = _same
    uuid_in: Callable[[Any], UUID | None] = _same
    uuids_out: Callable[[Sequence[UUID]], Any] = _same
    uuids_in: Callable[[Any], tuple[UUID, ...]] = tuple
    json_out: Callable[[Any], Any] = _json_text
    json_in: Callable[[Any], Any] = _same
    time_param: Callable[[datetime], Any] = _same
    uuid_param: Callable[[UUID], Any] = _same
    list_param: Callable[[list[Any]], Any] = list
    """A list parameter: a native array (PostgreSQL) or JSON text (SQLite)."""
    uuids_param: Callable[[Sequence[UUID]], Any] = list
    """A list of task ids as one parameter (every ``ids`` a statement reads): PostgreSQL's
    array as its text (the driver would dump a list element by element, in Python), JSON text
    on SQLite."""
    duration_param: Callable[[str, float], tuple[str, Any]] = _seconds
    """A duration parameter's name and value: ``ttl`` as ``ttl_secs`` (float seconds) or as
    ``ttl_us`` (integer microseconds)."""
    native: bool = True
    """True when the driver already returns UUIDs, datetimes and parsed JSON (PostgreSQL)."""

    def param(self, value: Any) -> Any:
        """One statement parameter as the driver takes it."""
        if isinstance(value, datetime):
            return self.time_param(value)
        if isinstance(value, UUID):
            return self.uuid_param(value)
        if isinstance(value, list | tuple):
            return self.list_param([self.param(v) for v in value])
        return value

    def params(self, **values: Any) -> dict[str, Any]:
        """Statement parameters by name (text, numbers and None pass as they are)."""
        return {name: self.param(value) for name, value in values.items()}

    def durations(self, **secs: float) -> dict[str, Any]:
        """Duration parameters, named and scaled as the dialect's queries read them."""
        return dict(self.duration_param(name, value) for name, value in secs.items())

    def at(self, value: Any) -> datetime:
        """A time read from a NOT NULL column."""
        decoded = self.time_in(value)
        assert decoded is not None
        return decoded

    def uuid(self, value: Any) -> UUID:
        """A UUID read from a NOT NULL column."""
        decoded = self.uuid_in(value)
        assert decoded is not None
        return decoded


TASK_INSERT_FIELDS = (
    "id", "tenant", "source", "source_id", "title", "task_type", "payload", "priority", "state",
    "max_retries", "timeout_secs", "assignee", "depends_on", "idempotency_key", "callback_url",
    "requested_by", "run_after", "eligible_at", "created_at", "event_seq", "last_hash", "hold",
    "state_reason", "kind", "labels", "traceparent", "in_reply_to",
)  # fmt: skip

MUTABLE_FIELDS = (
    "state", "state_reason", "priority", "retry_count", "lock_token", "locked_at",
    "heartbeat_at", "lease_expires_at", "assignee", "assigned_to", "checkpoint", "tool_calls",
    "result", "error", "approved_by", "run_after", "eligible_at", "started_at", "finished_at",
    "updated_at", "event_seq", "last_hash", "hold", "tool_deadline_at", "agent",
)  # fmt: skip
"""Columns a change may set; everything else is fixed at submit."""

_TIME_FIELDS = frozenset(
    {"locked_at", "heartbeat_at", "lease_expires_at", "run_after", "eligible_at", "started_at",
     "finished_at", "updated_at", "created_at", "tool_deadline_at"}
)  # fmt: skip
_JSON_FIELDS = frozenset({"payload", "checkpoint", "result"})


def encode(name: str, value: Any, codec: Codec) -> Any:
    """One column's value as the dialect's bulk format carries it."""
    if value is None:
        return None
    if name in _TIME_FIELDS:
        return codec.time_out(value)
    if name in _JSON_FIELDS:
        return codec.json_out(value)
    if name in ("tool_calls", "labels"):
        return codec.json_out(list(value))
    if name in ("id", "lock_token", "in_reply_to"):
        return codec.uuid_out(value)
    if name == "depends_on":
        return codec.uuids_out(value)
    if name == "state":
        return value.value
    return value


def new_task_rows(new: Sequence[NewTask], codec: Codec) -> list[dict[str, Any]]:
    """One object per task to insert."""
    return [
        {name: encode(name, getattr(n.task, name), codec) for name in TASK_INSERT_FIELDS}
        for n in new
    ]


def change_rows(changes: Sequence[Change], codec: Codec) -> list[dict[str, Any]]:
    """One object per change: the guard, and only the columns the change sets (a missing key
    leaves the column as it is; a null sets it to NULL)."""
    rows = []
    for change in changes:
        row: dict[str, Any] = {
            name: encode(name, value, codec) for name, value in change.columns.items()
        }
        row["id"] = codec.uuid_out(change.task.id)
        row["expected_state"] = change.expected_state.value
        row["expected_seq"] = change.expected_event_seq
        rows.append(row)
    return rows


def event_rows(events: Sequence[Event], codec: Codec) -> list[dict[str, Any]]:
    """One object per event; ``e_data`` is the exact text the hash was taken over."""
    return [
        {
            "e_task_id": codec.uuid_out(e.task_id),
            "e_seq": e.seq,
            "e_tenant": e.tenant,
            "e_at": codec.time_out(e.at),
            "e_from": e.from_state.value if e.from_state else None,
            "e_to": e.to_state.value,
            "e_action": e.action,
            "e_actor": e.actor,
            "e_reason": e.reason,
            "e_data": e.data_text or data_text(e.data),
            "e_hash": e.hash,
        }
        for e in events
    ]


def log_rows(records: Sequence[LogRecord], codec: Codec) -> list[dict[str, Any]]:
    """One object per log record."""
    return [
        {
            "task_id": codec.uuid_out(r.task_id),
            "tenant": r.tenant,
            "attempt": r.attempt,
            "stream": r.stream,
            "at": codec.time_out(r.at),
            "text": r.text,
            "truncated": r.truncated,
        }
        for r in records
    ]


def task_from_row(row: Row, codec: Codec) -> Task:
    """A Task from a row of aq_tasks (every column, any order)."""
    return _task(dict(row), codec)  # type: ignore[call-overload]


def tasks_from_table(
    names: Sequence[str], rows: Sequence[Sequence[Any]], codec: Codec
) -> list[Task]:
    """Tasks from rows of aq_tasks given as value tuples, with the column names read once for
    the statement (every column, any order): what task_from_row gives for each, without a
    name-keyed row built and copied for every task.

    Where the driver gives times as numbers (SQLite), each distinct time is decoded once for
    the statement: the rows of one claim share most of theirs (claimed, heartbeat, started,
    updated and lease expiry at the claim's time; created and eligible at their submit's),
    and a datetime is immutable, so the tasks share it."""
    if codec.native:
        return [_task(dict(zip(names, row, strict=True)), codec) for row in rows]
    # Remembered per value for this statement only (a task's times are never mutated).
    time_in = functools.cache(codec.time_in)
    return [_task(dict(zip(names, row, strict=True)), codec, time_in) for row in rows]


def _task(
    values: dict[str, Any],
    codec: Codec,
    time_in: Callable[[Any], datetime | None] | None = None,
) -> Task:
    """A Task from the columns of one aq_tasks row by name (the dict becomes the task's);
    ``time_in`` decodes its times when given (else the codec's)."""
    values.pop("route_after", None)  # admission's own bookkeeping, not a task field
    values["state"] = TaskState(values["state"])
    values["depends_on"] = codec.uuids_in(values["depends_on"])
    values["tool_calls"] = tuple(codec.json_in(values["tool_calls"]) or ())
    values["labels"] = tuple(codec.json_in(values["labels"]) or ())
    if not codec.native:
        values["id"] = codec.uuid_in(values["id"])
        values["lock_token"] = codec.uuid_in(values["lock_token"])
        values["in_reply_to"] = codec.uuid_in(values["in_reply_to"])
        decode_time = time_in or codec.time_in
        for name in _TIME_FIELDS:
            values[name] = decode_time(values[name])
        for name in _JSON_FIELDS:
            values[name] = codec.json_in(values[name])
    return Task.from_fields(values)


def _event_fields(row: Row, codec: Codec) -> dict[str, Any]:
    """The columns of an aq_events row that an Event and a StoredEvent read alike."""
    return {
        "task_id": codec.uuid(row["task_id"]),
        "tenant": row["tenant"],
        "seq": row["seq"],
        "at": codec.at(row["at"]),
        "action": row["action"],
        "actor": row["actor"],
        "reason": row["reason"],
        "hash": row["hash"],
    }


def stored_event_from_row(row: Row, codec: Codec) -> StoredEvent:
    """An event exactly as stored (``data`` as text), for verification."""
    return StoredEvent(
        **_event_fields(row, codec),
        from_state=row["from_state"],
        to_state=row["to_state"],
        data_text=row["data"],
        gseq=row["gseq"],
        row_mac=row["row_mac"],
    )


def anchor_params(anchor: Anchor) -> dict[str, Any]:
    """The columns of an anchor to store (``at`` still a datetime: through the codec)."""
    return {
        "kind": anchor.kind,
        "at": anchor.at,
        "count": anchor.count,
        "digest": anchor.digest,
        "data": anchor.data,
        "mac": anchor.mac,
    }


def anchor_from_row(row: Row, codec: Codec) -> Anchor:
    """An anchor or purge record as stored."""
    return Anchor(
        kind=row["kind"],
        at=codec.at(row["at"]),
        count=int(row["count"]),
        digest=row["digest"],
        data=row["data"],
        mac=row["mac"],
        id=int(row["id"]),
    )


def task_head_from_row(row: Row, codec: Codec) -> TaskHead:
    """The audit head recorded on a task row."""
    return TaskHead(
        codec.uuid(row["id"]),
        row["tenant"],
        row["event_seq"],
        row["last_hash"],
        row["state"],
        RowFields(
            row["state"],
            int(row["priority"]),
            row["payload"],
            row["result"],
            row["assigned_to"],
            row["approved_by"],
            int(row["retry_count"]),
        ),
    )


def event_from_row(row: Row, codec: Codec) -> Event:
    """An Event from a row of aq_events (``data`` as stored text)."""
    return Event(
        **_event_fields(row, codec),
        from_state=TaskState(row["from_state"]) if row["from_state"] else None,
        to_state=TaskState(row["to_state"]),
        data=json.loads(row["data"]),
        data_text=row["data"],
    )


# --- Dead letter retention and alerts ------------------------------------------------------


def outbox_rows(items: Sequence[Delivery], codec: Codec) -> list[dict[str, Any]]:
    """One object per delivery to store; ``body`` travels as JSON text."""
    return [
        {
            "kind": i.kind,
            "task_id": codec.uuid_out(i.task_id),
            "event_seq": i.event_seq,
            "tenant": i.tenant,
            "url": i.url,
            "body": json.dumps(dict(i.body), separators=(",", ":"), ensure_ascii=False),
            "created_at": codec.time_out(i.at),
        }
        for i in items
    ]


def delivery_rows(results: Sequence[DeliveryResult], codec: Codec) -> list[dict[str, Any]]:
    """One object per try to record."""
    return [
        {
            "id": r.id,
            "lease_token": None if r.lease_token is None else codec.uuid_out(r.lease_token),
            "at": codec.time_out(r.at),
            "delivered_at": codec.time_out(r.at) if r.delivered else None,
            "given_up_at": codec.time_out(r.at) if r.given_up and not r.delivered else None,
            "error": None if r.delivered else (r.error or "failed"),
            "status_code": r.status_code,
            "duration_ms": r.duration_ms,
            "next_attempt_at": (
                None
                if r.delivered or r.next_attempt_at is None
                else codec.time_out(r.next_attempt_at)
            ),
        }
        for r in results
    ]


def delivery_record_from_row(row: Row, codec: Codec) -> DeliveryRecord:
    """A delivery as people see it, from a row of aq_outbox."""
    return DeliveryRecord(
        id=row["id"],
        kind=row["kind"],
        task_id=codec.uuid(row["task_id"]),
        tenant=row["tenant"],
        event_seq=row["event_seq"],
        url=row["url"],
        body=codec.json_in(row["body"]),
        attempts=row["attempts"],
        next_attempt_at=codec.at(row["next_attempt_at"]),
        delivered_at=codec.time_in(row["delivered_at"]),
        given_up_at=codec.time_in(row["given_up_at"]),
        last_error=row["last_error"],
        last_status=row["last_status"],
        created_at=codec.at(row["created_at"]),
        leased=bool(row["leased"]),
    )


def delivery_attempt_from_row(row: Row, codec: Codec) -> DeliveryAttempt:
    """One try, from a row of aq_delivery_attempts."""
    return DeliveryAttempt(
        codec.at(row["at"]), row["status_code"], float(row["duration_ms"]), row["error"]
    )


def outbox_from_row(row: Row, codec: Codec) -> OutboxRow:
    """A leased delivery from a row of aq_outbox."""
    return OutboxRow(
        id=row["id"],
        kind=row["kind"],
        task_id=codec.uuid(row["task_id"]),
        tenant=row["tenant"],
        event_seq=row["event_seq"],
        url=row["url"],
        body=codec.json_in(row["body"]),
        attempts=row["attempts"],
        created_at=codec.at(row["created_at"]),
        lease_token=codec.uuid_in(row["lease_token"]),
    )


def purge_rows(items: Sequence[Purge], codec: Codec) -> list[dict[str, Any]]:
    """One object per task to purge: its id and its guard."""
    return [{"id": codec.uuid_out(p.task_id), "expected_seq": p.expected_event_seq} for p in items]


# --- admission, leadership, pausing and schedules ---------------------------------------------


def record_from_row(cls: type[R], row: Row, codec: Codec) -> R:
    """A frozen record (Candidate, Bucket, LeaderInfo, PausedType, Schedule, LogRecord) from a
    row with a column of each field's name, each value decoded by the field's declared type."""
    plan = _record_decoders(cls, codec)  # type: ignore[arg-type]  # a class is hashable
    return cls(**{name: decode(row[name]) for name, decode in plan})


def records_from_table(
    cls: type[R], names: Sequence[str], rows: Sequence[Sequence[Any]], codec: Codec
) -> list[R]:
    """Records as :func:`record_from_row` gives them, from rows given as value tuples with the
    column names read once for the statement (the admission planner's candidates, a row per
    pending task, without a name-keyed row built for each)."""
    if not rows:
        return []  # SQLite names no columns without a row
    plan = _record_decoders(cls, codec)  # type: ignore[arg-type]  # a class is hashable
    at = [(names.index(name), decode) for name, decode in plan]
    return [cls(*[decode(row[i]) for i, decode in at]) for row in rows]


@functools.cache
def _record_decoders(cls: type[Any], codec: Codec) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """Each field of ``cls`` with its decoder, worked out once per record type and dialect
    (the admission planner reads its candidates through this, a row per pending task)."""
    decoders: dict[str, Callable[[Any], Any]] = {
        "datetime": codec.at,
        "datetime | None": codec.time_in,
        "UUID": codec.uuid,
        "tuple[str, ...]": lambda value: tuple(codec.json_in(value)),
        "dict[str, Any]": codec.json_in,
        "CatchUp": CatchUp,
        "Role": Role,
        "bool": bool,  # SQLite keeps 0 and 1
    }
    return tuple((f.name, decoders.get(str(f.type), _same)) for f in fields(cls))


def room_from_rows(rows: Sequence[Row]) -> Room:
    """The answer of ``admission_room``: what a global cap counts, and the tenants waiting."""
    return Room(int(rows[0]["n"]), rows[0]["last"] is not None, rows[0]["below"] is not None)


def load_rows(rows: Sequence[Row]) -> list[LoadRow]:
    """The rows of ``active_load``."""
    return [LoadRow(r["tenant"], r["agent"], r["n"]) for r in rows]


def bucket_rows(buckets: Mapping[str, Bucket], codec: Codec) -> list[dict[str, Any]]:
    """One object per rate limit bucket to store."""
    return [
        {"name": n, "tokens": b.tokens, "updated_at": codec.time_out(b.updated_at)}
        for n, b in buckets.items()
    ]
