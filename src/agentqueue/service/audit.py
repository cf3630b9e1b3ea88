"""Verifying the audit log (R3, R24): every task's chain, against itself and the task row; the
global sequence against the signed anchors (and the anchor file outside the database); the
append-only triggers; and the anchoring step that numbers events and signs anchors."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from ..domain.audit import (
    ANCHOR_KIND,
    GENESIS,
    Anchor,
    ChainBreak,
    StoredEvent,
    check_chain,
    installed_keys,
    plain_numbered,
    purged_ids,
    roll,
)
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
    problems: list[str] = field(default_factory=list)
    """What does not hold beyond single chains: the global sequence, the anchors, the anchor
    file, the append-only triggers."""

    @property
    def ok(self) -> bool:
        """True when every chain holds and nothing else is wrong."""
        return not self.breaks and not self.problems

    def to_json(self) -> dict[str, Any]:
        """As the API answers ``verify``: each break in words."""
        return {
            "ok": self.ok,
            "tasks": self.tasks,
            "events": self.events,
            "purged": self.purged,
            "breaks": [str(b) for b in self.breaks],
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifyReport:
        """The report :meth:`to_json` gave."""
        return cls(
            int(data["tasks"]),
            int(data["events"]),
            [ChainBreak.from_text(b) for b in data.get("breaks") or ()],
            int(data.get("purged", 0)),
            [str(p) for p in data.get("problems") or ()],
        )


async def _next(it: AsyncIterator[T]) -> T | None:
    try:
        return await anext(it)
    except StopAsyncIteration:
        return None


anchor_log = logging.getLogger("agentqueue.audit")

UNKEYED_WARNING = (
    "no audit key ([audit] key_file or key_env): audit hashes are plain SHA-256, which "
    "anyone who can write to the database can recompute over what they changed"
)


def warn_if_unkeyed() -> bool:
    """Log a warning when no audit key is configured; True if it did."""
    if installed_keys().current is None:
        anchor_log.warning(UNKEYED_WARNING)
        return True
    return False


async def verify(
    rt: Runtime, max_breaks: int = 100, progress: Callable[[int], None] | None = None
) -> VerifyReport:
    """Walk every task head and every event in one snapshot, merging the two by task id; then
    the global sequence against the anchors, the anchor file and the append-only triggers.

    A chain without a task row holds only if it ends in a purge (R8 retention) that a signed
    purge record names. ``progress`` is told of each task checked (``progress(1)``).
    """
    keys = installed_keys()
    tasks = events = purged = 0
    breaks: list[ChainBreak] = []
    problems: list[str] = []
    async with rt.store.audit_snapshot() as snap:
        guards = [g async for g in snap.guards]
        anchors = [a async for a in snap.anchors]
        valid: list[Anchor] = []
        for anchor in anchors:
            problem = keys.check(anchor.material(), anchor.mac)
            if problem is not None:
                problems.append(f"audit record {anchor.id} ({anchor.kind}): {problem}")
            else:
                valid.append(anchor)
        chain_anchors = [a for a in valid if a.kind == ANCHOR_KIND]
        latest = chain_anchors[-1] if chain_anchors else None
        plain_upto = plain_numbered(latest)
        recorded_purges: set[UUID] = set()
        for record in valid:
            recorded_purges |= purged_ids(record)
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
                        task_id,
                        group,
                        head.event_seq,
                        head.last_hash,
                        head.tenant,
                        head.state,
                        keys=keys,
                        plain_upto=plain_upto,
                    )
                    if found is None and head.row is not None:
                        problem = group[-1].row_problem(head.row, keys, plain_upto)
                        if problem is not None:
                            found = ChainBreak(task_id, group[-1].seq, problem)
                    head = await _next(snap.heads)
                else:
                    found = check_chain(
                        task_id, group, None, None, row_gone=True, keys=keys, plain_upto=plain_upto
                    )
                    if found is None and task_id not in recorded_purges:
                        found = ChainBreak(
                            task_id, group[-1].seq, "purged, but no signed purge record names it"
                        )
                    purged += found is None
            if found is not None:
                breaks.append(found)
            if progress is not None:
                progress(1)
        problems += await _sequence_problems(snap.numbered, chain_anchors)
    problems += _guard_problems(guards)
    problems += _file_problems(rt.settings.audit.anchor_file, chain_anchors)
    return VerifyReport(tasks, events, breaks, purged, problems)


async def _sequence_problems(
    numbered: AsyncIterator[tuple[int, str]], anchors: Sequence[Anchor]
) -> list[str]:
    """Each number of the global sequence up to the last anchor's must be an event or a gap
    that anchor signed (never both, never two events), each anchor must follow the one
    before, and the running hash over the events must be what each anchor signed. Numbers
    above the last anchor's are not anchored yet: they need only be unique."""
    current = await _next(numbered)
    digest = GENESIS
    after = 0
    for a in anchors:
        if a.after is not None and a.after != after:
            return [
                f"global sequence: anchor {a.id} follows #{a.after}, but the anchors before it "
                f"end at #{after} (an anchor was deleted)"
            ]
        position = after + 1
        for first, last in (*a.gaps, (a.count + 1, a.count)):
            while position < first:
                if current is None or current[0] > position:
                    return [
                        f"global sequence: event #{position} is missing (neither an event nor "
                        f"a gap anchor {a.id} signed)"
                    ]
                if current[0] < position:
                    return [f"global sequence: two events are numbered #{current[0]}"]
                digest = roll(digest, current[1])
                position += 1
                current = await _next(numbered)
            if first <= a.count:
                if current is not None and current[0] <= last:
                    return [
                        f"global sequence: event #{current[0]} is numbered where anchor {a.id} "
                        "signed a gap (it was added later)"
                    ]
                position = last + 1
        if digest != a.digest:
            return [
                f"global sequence: events #1..#{a.count} are not those anchor {a.id} "
                "signed (an event was replaced or removed)"
            ]
        after = a.count
    previous = after
    while current is not None:
        if current[0] <= previous:
            return [f"global sequence: two events are numbered #{current[0]}"]
        previous = current[0]
        current = await _next(numbered)
    return []


def _guard_problems(guards: Sequence[tuple[str, bool]]) -> list[str]:
    return [
        f"append-only trigger {name} is missing or disabled: the audit tables can be rewritten"
        for name, fires in guards
        if not fires
    ]


def _file_problems(path: Path | None, anchors: Sequence[Anchor]) -> list[str]:
    """The anchor file's last line must be an anchor of the database, unchanged. (The
    database may have newer ones: a process may have committed its anchor and not yet written
    its line.)"""
    if path is None:
        return []
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        return [f"anchor file {path}: cannot read ({exc.strerror})"]
    if not lines:
        return []
    try:
        last = json.loads(lines[-1])
        last_id, count = last["id"], last["count"]
        if not isinstance(last, dict) or not {"kind", "at", "digest", "mac"} <= last.keys():
            raise KeyError
    except (ValueError, TypeError, KeyError):
        return [f"anchor file {path}: its last line is not an anchor"]
    stored = {a.id: a for a in anchors}.get(last_id)
    if stored is None:
        return [
            f"anchor {last_id} of the anchor file (up to #{count}) is not in the database "
            "(anchors were deleted, or forged ones did not verify)"
        ]
    # Lines written before a field was added to them lack it: compare what the line has.
    expected = json.loads(stored.line())
    if any(expected.get(k) != v for k, v in last.items()):
        return [
            f"anchor {last_id} of the anchor file (up to #{count}) differs from anchor "
            f"{stored.id} in the database (up to #{stored.count})"
        ]
    return []


async def anchor(rt: Runtime, limit: int = 100_000) -> list[Anchor]:
    """Sign an anchor over the events not yet anchored (in steps of at most ``limit`` numbers
    of the global sequence), writing each to the anchor file and the log too; the anchors
    made. A step that covers fewer than ``limit`` numbers caught up: events written since are
    left to the next call."""
    made: list[Anchor] = []
    while True:
        new = await rt.store.anchor_audit(rt.clock.now(), limit)
        if new is None:
            return made
        write_anchor_line(rt.settings.audit.anchor_file, new)
        made.append(new)
        if new.after is not None and new.count - new.after < limit:
            return made


def write_anchor_line(path: Path | None, anchor: Anchor) -> None:
    """Append the anchor to the anchor file (opened for appending only) and log it."""
    line = anchor.line()
    anchor_log.info("audit anchor %s", line)
    if path is not None:
        with path.open("a") as f:
            f.write(line + "\n")
            f.flush()


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
