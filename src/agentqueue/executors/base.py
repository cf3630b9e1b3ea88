"""What every executor takes and gives back.

The worker hands an executor a claimed task and an :class:`AttemptControl` (the deadline and the
cancel signal); the executor runs the attempt and answers an :class:`AttemptResult`. Executors
never write to the store: the worker records results in batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
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
    WAITING_TOOL = "waiting_tool"  # the task asked for a tool call (see ``tool_call``)
    PREEMPTED = "preempted"  # it yielded its slot when asked to (see AttemptControl.request_yield)


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call an attempt ended on: the task waits (no slot held) until its result."""

    name: str
    args: Any = None
    timeout_secs: float | None = None


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
    tool_call: ToolCallRequest | None = None
    """With ``WAITING_TOOL``: the call to wait for."""
    checkpoint: Any = None
    checkpointed: bool = False
    """The attempt saved ``checkpoint`` (its latest progress), to be kept with the task."""


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
    yield_grace_secs: float = 5.0
    """After :meth:`request_yield`, how long a command agent gets to checkpoint and exit."""
    yielding: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the worker asks the attempt to give up its slot (preemption, R11)."""
    save_checkpoint: Callable[[Any], Awaitable[bool]] | None = None
    """Keep a checkpoint with the task now (fenced by the lease); False if the lease is lost."""
    send_reply: Callable[[Any], Awaitable[str | None]] | None = None
    """Record the reply the agent sent (a ``{"reply": {...}}`` line) now: None once it is
    recorded, else why it was refused (naming the field)."""
    _on_stop: list[Callable[[], object]] = field(default_factory=list)
    _on_yield: list[Callable[[], object]] = field(default_factory=list)

    def request_yield(self) -> None:
        """Ask the attempt to checkpoint and give its slot back (it goes back to the queue, not
        counted as a retry)."""
        if not self.yielding.is_set():
            self.yielding.set()
            for callback in self._on_yield:
                callback()

    def on_yield(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when a yield is requested (at once if it already was)."""
        if self.yielding.is_set():
            callback()
        else:
            self._on_yield.append(callback)

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
    agents: frozenset[str]
    """The configured agents it runs (tasks routed to them are its own); empty for handlers."""
    max_concurrent: int

    async def run(self, task: Task, control: AttemptControl) -> AttemptResult:
        """Run one attempt of ``task``; never raise for anything the task did."""
        ...
