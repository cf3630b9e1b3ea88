"""Verifying the audit log (R3): every task's chain, against itself and the task row."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..domain.audit import ChainBreak, StoredEvent, check_chain
from ..domain.models import Event, Task
from .runtime import Runtime

T = TypeVar("T")


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` checked and the chains that do not hold, first one first."""

    tasks: int
    events: int
    breaks: list[ChainBreak] = field(default_factory=list)
    purged: int = 0
    """Chains checked whose task row retention purged (their events stay; not in ``tasks``)."""

    @property
    def ok(self) -> bool:
        """True when every chain holds."""
        return not self.breaks

    def to_json(self) -> dict[str, Any]:
        """As the API answers ``verify``: each break in words."""
        return {
            "ok": self.ok,
            "tasks": self.tasks,
            "events": self.events,
            "purged": self.purged,
            "breaks": [str(b) for b in self.breaks],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifyReport:
        """The report :meth:`to_json` gave."""
        return cls(
            int(data["tasks"]),
            int(data["events"]),
            [ChainBreak.from_text(b) for b in data.get("breaks") or ()],
            int(data.get("purged", 0)),
        )


async def _next(it: AsyncIterator[T]) -> T | None:
    try:
        return await anext(it)
    except StopAsyncIteration:
        return None


async def verify(
    rt: Runtime, max_breaks: int = 100, progress: Callable[[int], None] | None = None
) -> VerifyReport:
    """Walk every task head and every event in one snapshot, merging the two by task id.

    A chain without a task row holds only if it ends in a purge (R8 retention). ``progress``
    is told of each task checked (``progress(1)``).
    """
    tasks = events = purged = 0
    breaks: list[ChainBreak] = []
    async with rt.store.audit_snapshot() as snap:
        head = await _next(snap.heads)
        event = await _next(snap.events)
        while (head is not None or event is not None) and len(breaks) < max_breaks:
            if event is None or (head is not None and head.task_id < event.task_id):
                assert head is not None
                tasks += 1
                found = check_chain(
                    head.task_id, [], head.event_seq, head.last_hash, head.tenant, head.state
                )
                head = await _next(snap.heads)
            else:
                task_id = event.task_id
                group: list[StoredEvent] = []
                while event is not None and event.task_id == task_id:
                    group.append(event)
                    event = await _next(snap.events)
                events += len(group)
                if head is not None and head.task_id == task_id:
                    tasks += 1
                    found = check_chain(
                        task_id, group, head.event_seq, head.last_hash, head.tenant, head.state
                    )
                    head = await _next(snap.heads)
                else:
                    found = check_chain(task_id, group, None, None, row_gone=True)
                    purged += found is None
            if found is not None:
                breaks.append(found)
            if progress is not None:
                progress(1)
    return VerifyReport(tasks, events, breaks, purged)


def verify_task(task: Task, events: Sequence[Event]) -> ChainBreak | None:
    """Check one task's chain (``events``, as read for it) against itself and its row; None
    when it holds."""
    stored = [
        StoredEvent(
            e.task_id,
            e.tenant,
            e.seq,
            e.at,
            e.from_state.value if e.from_state else None,
            e.to_state.value,
            e.action,
            e.actor,
            e.reason,
            e.data_text,
            e.hash,
        )
        for e in events
    ]
    return check_chain(
        task.id, stored, task.event_seq, task.last_hash, task.tenant, task.state.value
    )
