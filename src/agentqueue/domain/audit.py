"""The tamper-evident audit chain (R3).

Each task has its own chain of events numbered 1, 2, 3, ... Every event's hash covers the previous
event's hash and every field of the event, so changing an event breaks its hash and deleting one
breaks the numbering or the head recorded on the task (``event_seq``, ``last_hash``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from .models import Event, Task
from .task_state import TaskState

GENESIS = "0" * 64
"""The "previous hash" of every task's first event."""

PURGE_ACTION = "purge"
"""The action of the last event of a task whose row retention removed (R8). Its chain is the
only one that may outlive its task row, and nothing may follow it."""


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value that hashes are taken over (sorted keys, no spaces)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def canonical_time(at: datetime) -> int:
    """Microseconds since the Unix epoch: the same number from every store."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _field(text: str) -> str:
    return f"{len(text)}:{text}"


def hash_tail(
    at: datetime,
    from_state: str | None,
    to_state: str,
    action: str,
    actor: str,
    reason: str,
    data_text: str,
) -> str:
    """The part of an event's hashed material that follows its task and position. A change
    applied to a whole batch at once shares it, so stores compute it once per batch."""
    return "".join(
        _field(f)
        for f in (
            str(canonical_time(at)),
            from_state or "",
            to_state,
            action,
            actor,
            reason,
            data_text,
        )
    )


def chain_hash(prev_hash: str, task_id: str, tenant: str, seq: int, tail: str) -> str:
    """The hash of one event (SHA-256, as hex) from the previous hash, its task, its position
    and its tail (:func:`hash_tail`). The stores compute exactly this in SQL (``aq_event_hash``).

    Each field goes in as its length, a colon and its text, so no choice of field contents can
    make two different events hash alike. (This runs for every change: it is kept cheap.)
    """
    material = _field(prev_hash) + _field(task_id) + _field(tenant) + _field(str(seq)) + tail
    return hashlib.sha256(material.encode()).hexdigest()


def chained_event(
    task: Task,
    seq: int,
    prev_hash: str,
    at: datetime,
    from_state: TaskState | None,
    to_state: TaskState,
    action: str,
    actor: str,
    reason: str,
    data: dict[str, Any],
) -> Event:
    """Event ``seq`` of ``task``'s chain, hashed after ``prev_hash``: the one place an event and
    its hash are made, so a change and a purge are chained alike."""
    text = data_text(data)
    from_value = from_state.value if from_state else None
    tail = hash_tail(at, from_value, to_state.value, action, actor, reason, text)
    return Event(
        task_id=task.id,
        tenant=task.tenant,
        seq=seq,
        at=at,
        from_state=from_state,
        to_state=to_state,
        action=action,
        actor=actor,
        reason=reason,
        data=data,
        hash=chain_hash(prev_hash, str(task.id), task.tenant, seq, tail),
        data_text=text,
    )


@dataclass(frozen=True)
class StoredEvent:
    """An event row exactly as read back for verification (``data_text`` as stored)."""

    task_id: UUID
    tenant: str
    seq: int
    at: datetime
    from_state: str | None
    to_state: str
    action: str
    actor: str
    reason: str
    data_text: str
    hash: str

    def expected_hash(self, prev_hash: str) -> str:
        """The hash this event should carry after ``prev_hash``."""
        tail = hash_tail(
            self.at,
            self.from_state,
            self.to_state,
            self.action,
            self.actor,
            self.reason,
            self.data_text,
        )
        return chain_hash(prev_hash, str(self.task_id), self.tenant, self.seq, tail)


@dataclass(frozen=True)
class ChainBreak:
    """The first place a task's chain does not hold, in words a person can act on."""

    task_id: UUID
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"task {self.task_id} event {self.seq}: {self.problem}"

    @classmethod
    def from_text(cls, text: str) -> ChainBreak:
        """The break whose words (``str(brk)``, as the API reports it) are ``text``; ValueError
        if they are not such words."""
        match = _BREAK_TEXT.fullmatch(text)
        if match is None:
            raise ValueError(f"not the words of a chain break: {text[:80]!r}")
        return cls(UUID(match.group(1)), int(match.group(2)), match.group(3))


_BREAK_TEXT = re.compile(r"task ([0-9a-f-]{36}) event (-?\d+): (.*)", re.DOTALL)


def check_chain(
    task_id: UUID,
    events: Iterable[StoredEvent],
    head_seq: int | None,
    head_hash: str | None,
    tenant: str | None = None,
    head_state: str | None = None,
    *,
    row_gone: bool = False,
) -> ChainBreak | None:
    """Check one task's events (in seq order) against each other and the head on the task row.

    ``head_seq``/``head_hash`` are None when the task row is not at hand; then the chain is only
    checked internally. ``head_state``, the state on the task row, must be where the last event
    left the task, so a row edited around a truncated chain is caught too. ``row_gone`` says the
    task row no longer exists: that holds only for a chain that ends in a purge. A purge is
    always the last event.
    """
    prev = GENESIS
    last_to: str | None = None
    last_action: str | None = None
    expected_seq = 1
    for event in events:
        if event.seq != expected_seq:
            missing = expected_seq if event.seq > expected_seq else event.seq
            return ChainBreak(task_id, missing, f"missing (found event {event.seq} next)")
        if last_action == PURGE_ACTION:
            return ChainBreak(task_id, event.seq, "recorded after the task was purged")
        if tenant is not None and event.tenant != tenant:
            return ChainBreak(task_id, event.seq, "tenant differs from the task's")
        if event.expected_hash(prev) != event.hash:
            return ChainBreak(task_id, event.seq, "hash does not match its contents")
        prev = event.hash
        last_to = event.to_state
        last_action = event.action
        expected_seq += 1
    last = expected_seq - 1
    if row_gone and last_action != PURGE_ACTION:
        return ChainBreak(task_id, max(last, 1), "its task row is gone, and it was not purged")
    if head_seq is not None and last_action == PURGE_ACTION:
        return ChainBreak(task_id, last, "purged, but its task row is still there")
    if head_seq is not None and last != head_seq:
        if last < head_seq:
            return ChainBreak(task_id, last + 1, f"missing (the task records {head_seq} events)")
        return ChainBreak(task_id, head_seq + 1, "not recorded on the task")
    if head_hash is not None and last > 0 and prev != head_hash:
        return ChainBreak(task_id, last, "hash differs from the one recorded on the task")
    if head_state is not None and last_to is not None and last_to != head_state:
        return ChainBreak(
            task_id, last, f"leaves the task {last_to}, but the task row says {head_state}"
        )
    return None


def data_text(data: Mapping[str, Any]) -> str:
    """The stored text of an event's data."""
    return canonical_json(dict(data))
