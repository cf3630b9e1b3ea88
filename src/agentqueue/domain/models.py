"""Frozen records: Task (SPEC section 1), Event (R3) and the default timeouts per task type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from .task_state import TaskState

DEFAULT_TIMEOUTS: dict[str, int] = {
    "bugfix": 120,
    "review": 180,
    "feature": 600,
    "test": 120,
    "docs": 60,
    "refactor": 900,
}
"""Seconds per attempt by task_type (SPEC section 1); other types get DEFAULT_TIMEOUT."""

DEFAULT_TIMEOUT = 300

SOURCES = frozenset({"issue", "pr", "api", "cron", "manual", "mail"})
"""Where work comes from (SPEC section 1)."""


def default_timeout(task_type: str, overrides: dict[str, int] | None = None) -> int:
    """The attempt timeout for a task type: configured override, then the SPEC map, then 300 s."""
    if overrides and task_type in overrides:
        return overrides[task_type]
    return DEFAULT_TIMEOUTS.get(task_type, DEFAULT_TIMEOUT)


@dataclass(frozen=True)
class Task:
    """One unit of agent work as stored: the fields of SPEC section 1 plus bookkeeping.

    ``seq`` orders submissions (FIFO within a priority); ``eligible_at`` is when the task last
    became able to run, from which it ages; ``event_seq`` and ``last_hash`` are the head of its
    audit chain; ``state_reason`` says why it is in its state (an error, a blocking rule, ...).
    """

    id: UUID
    tenant: str
    source: str
    source_id: str | None
    title: str
    task_type: str
    payload: Any
    priority: int
    state: TaskState
    max_retries: int
    retry_count: int
    timeout_secs: int
    created_at: datetime
    updated_at: datetime
    eligible_at: datetime
    requested_by: str
    seq: int = 0
    event_seq: int = 0
    last_hash: str = ""
    lock_token: UUID | None = None
    locked_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    assignee: str | None = None
    assigned_to: str | None = None
    depends_on: tuple[UUID, ...] = ()
    idempotency_key: str | None = None
    callback_url: str | None = None
    checkpoint: Any = None
    tool_calls: tuple[Any, ...] = ()
    result: Any = None
    error: str | None = None
    state_reason: str | None = None
    hold: str | None = None
    """What holds a blocked task: ``dependencies`` or ``approval``."""
    tool_deadline_at: datetime | None = None
    """While waiting_tool: when the awaited tool call times out."""
    approved_by: str | None = None
    kind: str = "task"
    """The pipeline the task goes through (R14): ``task``, ``mail`` or a registered kind."""
    labels: tuple[str, ...] = ()
    """Capabilities the agent that runs it must declare (routing, R14)."""
    agent: str | None = None
    """The agent routing chose when the task was admitted; only that agent's executors claim
    it (None: any executor serving its task_type)."""
    run_after: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    traceparent: str | None = None
    """The W3C trace context taken at submit: each attempt's span is its child, and command
    agents get it (or the attempt span's) as ``TRACEPARENT``."""
    in_reply_to: UUID | None = None
    """The mail this one answers (a mail thread, R25); None for everything else."""

    @property
    def terminal(self) -> bool:
        """Whether the task has reached a state it never leaves."""
        return self.state.terminal

    @property
    def id_text(self) -> str:
        """``str(self.id)``, formatted once per task and kept with it (copies made by
        :meth:`evolve` keep it): a worker names each task in its job, its claim's log line and
        its outcome's, and formatting a UUID costs a microsecond."""
        text: str | None = self.__dict__.get(_ID_TEXT)
        if text is None:
            text = self.__dict__[_ID_TEXT] = str(self.id)
        return text

    def evolve(self, **changes: Any) -> Task:
        """A copy with ``changes`` applied. Like ``dataclasses.replace`` without re-running
        ``__init__`` for all 38 fields: this is on the hot path of every transition."""
        if not _TASK_FIELDS.issuperset(changes):
            unknown = changes.keys() - _TASK_FIELDS
            raise TypeError(f"Task has no field {sorted(unknown)[0]!r}")
        values = self.__dict__.copy()
        values.update(changes)
        if "id" in changes:
            values.pop(_ID_TEXT, None)
        return Task.from_fields(values)

    @staticmethod
    def from_fields(values: dict[str, Any]) -> Task:
        """A Task from a complete dict of its fields, already of the right types (stores use
        this to build tasks from rows without the cost of ``__init__``)."""
        task = object.__new__(Task)
        object.__setattr__(task, "__dict__", values)
        return task

    def to_json(self) -> dict[str, Any]:
        """The task as a JSON object with the field names of SPEC section 1."""
        return {
            "id": str(self.id),
            "tenant": self.tenant,
            "source": self.source,
            "source_id": self.source_id,
            "title": self.title,
            "task_type": self.task_type,
            "payload": self.payload,
            "priority": self.priority,
            "state": self.state.value,
            "state_reason": self.state_reason,
            "hold": self.hold,
            "max_retries": self.max_retries,
            "retry_count": self.retry_count,
            "timeout_secs": self.timeout_secs,
            "lock_token": str(self.lock_token) if self.lock_token else None,
            "locked_at": _iso(self.locked_at),
            "heartbeat_at": _iso(self.heartbeat_at),
            "kind": self.kind,
            "labels": list(self.labels),
            "assignee": self.assignee,
            "agent": self.agent,
            "assigned_to": self.assigned_to,
            "depends_on": [str(d) for d in self.depends_on],
            "idempotency_key": self.idempotency_key,
            "callback_url": self.callback_url,
            "checkpoint": self.checkpoint,
            "tool_calls": list(self.tool_calls),
            "result": self.result,
            "error": self.error,
            "requested_by": self.requested_by,
            "approved_by": self.approved_by,
            "run_after": _iso(self.run_after),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "traceparent": self.traceparent,
            "in_reply_to": str(self.in_reply_to) if self.in_reply_to else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        """The task :meth:`to_json` gave (as the HTTP API answers it); keys it does not know
        are ignored. What the JSON does not carry is bookkeeping of the store: ``seq``,
        ``event_seq``, ``last_hash``, ``lease_expires_at`` and ``tool_deadline_at`` keep their
        defaults, and ``eligible_at`` is taken to be ``created_at``."""
        created = _at(data["created_at"])
        return cls(
            id=UUID(data["id"]),
            tenant=data["tenant"],
            source=data["source"],
            source_id=data.get("source_id"),
            title=data["title"],
            task_type=data["task_type"],
            payload=data.get("payload"),
            priority=int(data["priority"]),
            state=TaskState(data["state"]),
            max_retries=int(data["max_retries"]),
            retry_count=int(data["retry_count"]),
            timeout_secs=int(data["timeout_secs"]),
            created_at=created,
            updated_at=_at(data["updated_at"]),
            eligible_at=created,
            requested_by=data["requested_by"],
            lock_token=_uuid_or_none(data.get("lock_token")),
            locked_at=_at_or_none(data.get("locked_at")),
            heartbeat_at=_at_or_none(data.get("heartbeat_at")),
            assignee=data.get("assignee"),
            assigned_to=data.get("assigned_to"),
            depends_on=tuple(UUID(d) for d in data.get("depends_on") or ()),
            idempotency_key=data.get("idempotency_key"),
            callback_url=data.get("callback_url"),
            checkpoint=data.get("checkpoint"),
            tool_calls=tuple(data.get("tool_calls") or ()),
            result=data.get("result"),
            error=data.get("error"),
            state_reason=data.get("state_reason"),
            hold=data.get("hold"),
            approved_by=data.get("approved_by"),
            kind=data.get("kind", "task"),
            labels=tuple(data.get("labels") or ()),
            agent=data.get("agent"),
            run_after=_at_or_none(data.get("run_after")),
            started_at=_at_or_none(data.get("started_at")),
            finished_at=_at_or_none(data.get("finished_at")),
            traceparent=data.get("traceparent"),
            in_reply_to=_uuid_or_none(data.get("in_reply_to")),
        )


_TASK_FIELDS = frozenset(f.name for f in fields(Task))
_ID_TEXT = "_id_text"
"""Where Task.id_text keeps its text: beside the fields, not one of them (equality, repr and
to_json read the fields only)."""


@dataclass(frozen=True)
class Event:
    """One audited change of a task (R3). ``hash`` chains it to the task's previous event."""

    task_id: UUID
    tenant: str
    seq: int
    at: datetime
    from_state: TaskState | None
    to_state: TaskState
    action: str
    actor: str
    reason: str
    data: dict[str, Any] = field(default_factory=dict)
    hash: str = ""
    data_text: str = field(default="", compare=False, repr=False)
    """The exact text of ``data`` the hash was taken over (kept so it is encoded once)."""

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object."""
        return {
            "task_id": str(self.task_id),
            "tenant": self.tenant,
            "seq": self.seq,
            "at": _iso(self.at),
            "from": self.from_state.value if self.from_state else None,
            "to": self.to_state.value,
            "action": self.action,
            "actor": self.actor,
            "reason": self.reason,
            "data": self.data,
            "hash": self.hash,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        """The event :meth:`to_json` gave (``data_text``, the exact text hashed, is not
        carried: it stays empty)."""
        before = data.get("from")
        return cls(
            task_id=UUID(data["task_id"]),
            tenant=data["tenant"],
            seq=int(data["seq"]),
            at=_at(data["at"]),
            from_state=TaskState(before) if before is not None else None,
            to_state=TaskState(data["to"]),
            action=data["action"],
            actor=data["actor"],
            reason=data.get("reason", ""),
            data=dict(data.get("data") or {}),
            hash=data.get("hash", ""),
        )


@dataclass(frozen=True)
class LogRecord:
    """Output captured from one attempt of a task: agent stdout/stderr or handler log lines."""

    task_id: UUID
    tenant: str
    attempt: int
    stream: str
    at: datetime
    text: str
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object."""
        return {
            "task_id": str(self.task_id),
            "tenant": self.tenant,
            "attempt": self.attempt,
            "stream": self.stream,
            "at": _iso(self.at),
            "text": self.text,
            "truncated": self.truncated,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogRecord:
        """The record :meth:`to_json` gave."""
        return cls(
            task_id=UUID(data["task_id"]),
            tenant=data["tenant"],
            attempt=int(data["attempt"]),
            stream=data["stream"],
            at=_at(data["at"]),
            text=data["text"],
            truncated=bool(data.get("truncated", False)),
        )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _at_or_none(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _uuid_or_none(value: str | None) -> UUID | None:
    return None if value is None else UUID(value)
