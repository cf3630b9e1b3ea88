"""What a worker's run did, counted by task: how each task it claimed ended in this run.

A task is counted once, by what its last recorded outcome in this run made of it (a task that
failed once and then completed on its retry is completed). Attempts that failed and went back
for a retry are counted apart, as attempts.

A task is remembered by its id only while its ending may still change: once it has ended for
good (completed, failed, dead-lettered) only the counts keep it, so a worker that runs for
weeks holds no entry for each task it ever ran. A task that a person sends back to the queue
after that (``retry``) and this worker claims again counts as a task again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from uuid import UUID

from ..domain.models import Task
from ..domain.states import Refusal
from ..domain.task_state import TaskState
from ..service.execution import Outcome, OutcomeKind

# How a task ended in this run, by the state its last outcome left it in; in print order.
ENDINGS: tuple[tuple[str, str], ...] = (
    ("completed", "completed"),
    ("failed", "failed for good"),
    ("dead_lettered", "dead-lettered"),
    ("retrying", "waiting to retry"),
    ("waiting_tool", "waiting on a tool"),
    ("preempted", "preempted"),
    ("released", "released at shutdown"),
    ("stopped", "stopped without an outcome"),
    ("not_recorded", "outcome refused"),
    ("unrecorded", "outcome not written"),
    ("other", "other"),
)
ALWAYS_SHOWN = ("completed", "failed", "dead_lettered")
_FINAL = frozenset(ALWAYS_SHOWN)
"""Endings that are for good: the task's state is terminal."""

_BY_STATE = {
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.DEAD_LETTER: "dead_lettered",
    TaskState.RETRYING: "retrying",
    TaskState.WAITING_TOOL: "waiting_tool",
}


class RunSummary:
    """Counts, by task, how the tasks a worker claimed ended in its run."""

    def __init__(self) -> None:
        self._ending: dict[UUID, str] = {}
        """How each task whose ending may still change ended so far."""
        self._final = 0
        """Tasks that ended for good, no longer remembered by id."""
        # Kept as endings change, so that counts() is cheap enough to poll (the bench does).
        self._ended: Counter[str] = Counter()
        self.retried = 0
        """Attempts that failed and left their task waiting to retry."""

    @property
    def remembered(self) -> int:
        """Tasks remembered by id: those whose ending may still change in this run."""
        return len(self._ending)

    def _end(self, task_id: UUID, ending: str) -> None:
        before = self._ending.get(task_id)
        if before is not None:
            self._ended[before] -= 1
        self._ended[ending] += 1
        if ending in _FINAL:
            self._ending.pop(task_id, None)
            self._final += 1
        else:
            self._ending[task_id] = ending

    def claimed(self, task: Task) -> None:
        """A task was claimed; until an outcome of it is recorded, it ended unrecorded."""
        self._end(task.id, "unrecorded")

    def no_outcome(self, task: Task) -> None:
        """An attempt reports nothing (revoked, cancelled, its lease lost or guarded)."""
        self._end(task.id, "stopped")

    def recorded(self, batch: Sequence[Outcome], done: Mapping[UUID, Task | Refusal]) -> None:
        """Outcomes were written; ``done`` holds each task as left (or the refusal)."""
        kinds = {o.task_id: o.kind for o in batch}
        for task_id, answer in done.items():
            if isinstance(answer, Refusal):
                self._end(task_id, "not_recorded")
                continue
            ending = _BY_STATE.get(answer.state)
            if ending is None:
                kind = kinds.get(task_id)
                ending = {
                    OutcomeKind.PREEMPTED: "preempted",
                    OutcomeKind.RELEASED: "released",
                }.get(kind, "other") if kind is not None else "other"  # fmt: skip
            if ending == "retrying":
                self.retried += 1
            self._end(task_id, ending)

    def counts(self) -> dict[str, int]:
        """Tasks claimed, tasks by how they ended (every ending, zeros too), attempts retried."""
        return {
            "tasks": len(self._ending) + self._final,
            **{name: self._ended[name] for name, _ in ENDINGS},
            "retried_attempts": self.retried,
        }

    def line(self) -> str:
        """The counts in words, e.g. ``4 tasks: 4 completed, 0 failed for good, 0
        dead-lettered; 1 attempt failed and was retried``."""
        counts = self.counts()
        tasks = counts["tasks"]
        parts = [
            f"{counts[name]} {words}"
            for name, words in ENDINGS
            if counts[name] or name in ALWAYS_SHOWN
        ]
        text = f"{tasks} task{'' if tasks == 1 else 's'}: {', '.join(parts)}"
        retried = counts["retried_attempts"]
        attempts = "attempt" if retried == 1 else "attempts"
        return f"{text}; {retried} {attempts} failed and went back to retry"
