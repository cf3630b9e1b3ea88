"""What every executor takes and gives back.

The worker hands an executor a claimed task and an :class:`AttemptControl` (the deadline and the
cancel signal); the executor runs the attempt and answers an :class:`AttemptResult`. Executors
never write to the store: the worker records results in batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from ..domain.models import Task


class AttemptEnd(StrEnum):
    """How an attempt ended, as the executor saw it."""

    COMPLETED = "completed"
    FAILED = "failed"  # see ``retryable``
    TIMED_OUT = "timed_out"  # the attempt deadline passed; the work was stopped
    CANCELLED = "cancelled"  # the worker asked it to stop (cancel, lost lease, shutdown)


@dataclass(frozen=True)
class LogChunk:
    """Captured output of an attempt: ``stream`` is stdout, stderr or log (handler lines)."""

    stream: str
    text: str
    truncated: bool = False


@dataclass(frozen=True)
class AttemptResult:
    """What an attempt produced."""

    end: AttemptEnd
    result: Any = None
    error: str | None = None
    retryable: bool = False
    logs: tuple[LogChunk, ...] = ()


@dataclass
class AttemptControl:
    """The worker's side of a running attempt.

    ``deadline`` is a ``time.monotonic()`` instant; ``cancel`` is set when the attempt must stop
    at once (the task was cancelled, its lease was lost, or the worker is shutting down), and
    ``cancel_reason`` says which. ``kill_grace_secs`` is how long a process tree gets between
    SIGTERM and SIGKILL when stopped for a timeout; a cancel uses ``cancel_grace_secs``.
    """

    deadline: float
    timeout_secs: float | None = None
    """The attempt's whole timeout, for messages (``deadline`` may be nearer: the clock started
    at the claim)."""
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: str = ""
    kill_grace_secs: float = 5.0
    cancel_grace_secs: float = 0.5
    _on_stop: list[Callable[[], object]] = field(default_factory=list)

    def stop(self, reason: str) -> None:
        """Ask the attempt to stop now."""
        if not self.cancel.is_set():
            self.cancel_reason = reason
            self.cancel.set()
            for callback in self._on_stop:
                callback()

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when the attempt is asked to stop (at once if it already was)."""
        if self.cancel.is_set():
            callback()
        else:
            self._on_stop.append(callback)

    def off_stop(self, callback: Callable[[], object]) -> None:
        """No longer call ``callback`` on stop."""
        if callback in self._on_stop:
            self._on_stop.remove(callback)

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())


class Executor(Protocol):
    """Runs attempts of the task types it serves."""

    name: str
    task_types: frozenset[str]
    max_concurrent: int

    async def run(self, task: Task, control: AttemptControl) -> AttemptResult:
        """Run one attempt of ``task``; never raise for anything the task did."""
        ...
