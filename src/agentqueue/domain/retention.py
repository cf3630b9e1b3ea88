"""Dead-letter retention (R8): how long a dead letter is kept, and the event that ends its chain.

A dead letter is kept ``dead_letter_p0_days`` (P0) or ``dead_letter_days`` (every other
priority) after it entered dead_letter, then purged: its task row and captured output are
deleted, and its audit chain, which stays, ends with one last event, the purge. A purge is not
a state change (there is no state after it), so that event records the task leaving the store
from dead_letter, in dead_letter, with the action ``purge`` (domain.audit.PURGE_ACTION).

Pure: no I/O, no clock reads; the caller passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .audit import PURGE_ACTION, chained_event
from .models import Event, Task
from .priority import MIN_PRIORITY
from .states import TaskState

DEFAULT_P0_DAYS = 30.0
DEFAULT_DAYS = 7.0


@dataclass(frozen=True)
class RetentionPolicy:
    """How many days a dead letter is kept: P0 ones, and all others."""

    p0_days: float = DEFAULT_P0_DAYS
    days: float = DEFAULT_DAYS

    def keep_for(self, priority: int) -> timedelta:
        """How long a dead letter of ``priority`` is kept."""
        return timedelta(days=self.p0_days if priority == MIN_PRIORITY else self.days)

    def cutoffs(self, now: datetime) -> tuple[datetime, datetime]:
        """(P0, others): a dead letter that entered dead_letter at or before its cutoff is due."""
        return now - timedelta(days=self.p0_days), now - timedelta(days=self.days)


def dead_letter_since(task: Task) -> datetime:
    """When the task entered dead_letter. Every change writes ``updated_at``, and the only
    changes of a dead letter take it out of dead_letter, so it is the time it came in."""
    return task.updated_at


def purge_due(task: Task, now: datetime, policy: RetentionPolicy) -> bool:
    """Whether ``task`` is a dead letter kept past its retention."""
    if task.state is not TaskState.DEAD_LETTER:
        return False
    return dead_letter_since(task) + policy.keep_for(task.priority) <= now


def purge_event(task: Task, at: datetime, policy: RetentionPolicy, actor: str) -> Event:
    """The last event of ``task``'s chain, chained after its head (``event_seq``, ``last_hash``).

    Raises ValueError if the task is not due (a caller bug: purging is not for anything else).
    """
    if not purge_due(task, at, policy):
        raise ValueError(f"task {task.id} is not a dead letter past its retention")
    keep = policy.keep_for(task.priority)
    days = keep.total_seconds() / 86_400
    reason = f"dead letter kept {days:g} days; purged"
    data = {
        "dead_letter_since": dead_letter_since(task).isoformat(),
        "priority": task.priority,
        "retention_days": days,
    }
    state = TaskState.DEAD_LETTER
    seq = task.event_seq + 1
    return chained_event(
        task, seq, task.last_hash, at, state, state, PURGE_ACTION, actor, reason, data
    )
