"""What a worker needs of its queue: a narrow view, so that the worker never imports the queue
(the queue builds workers, never the other way round; ARCHITECTURE rule 12)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol
from uuid import UUID

from ..clock import Clock
from ..config import Settings
from ..domain.models import LogRecord, Task
from ..domain.states import Refusal
from ..service.execution import HeartbeatReply, Outcome
from ..service.runtime import Runtime
from ..store import Lease, Store


class WorkQueue(Protocol):
    """The operations of :class:`agentqueue.AsyncQueue` a worker calls."""

    @property
    def store(self) -> Store:
        """The store (opened by :meth:`open`)."""

    @property
    def settings(self) -> Settings:
        """The settings in force."""

    @property
    def clock(self) -> Clock:
        """The clock in use."""

    async def open(self) -> None:
        """Connect (and migrate)."""

    async def runtime(self) -> Runtime:
        """The opened runtime the service functions take."""

    async def claim(
        self,
        n: int,
        worker: str,
        task_types: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
    ) -> list[Task]:
        """Claim up to ``n`` queued tasks."""

    async def heartbeat(self, leases: Iterable[Task | Lease]) -> HeartbeatReply:
        """Extend leases; report the lost ones."""

    async def finish(
        self,
        outcomes: Sequence[Outcome],
        *,
        actor: str | None = None,
        logs: Sequence[LogRecord] = (),
    ) -> dict[UUID, Task | Refusal]:
        """Record outcomes and logs in one transaction."""

    async def submit_tool_result(
        self, task_id: UUID | str, call_id: str, result: Any, *, actor: str | None = None
    ) -> Task:
        """Answer a tool call."""
