"""Helpers of the client tests: one awaitable face for both clients, and a queue on the
server's own database that moves tasks along as a worker would."""

from __future__ import annotations

import asyncio
import functools
import inspect
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from agentqueue import AsyncClient, AsyncQueue, Client, Task
from agentqueue.domain.models import Event, LogRecord
from agentqueue.service.execution import Outcome, OutcomeKind


class Either:
    """A Client or an AsyncClient, every method awaited: the sync client's run in a thread
    (``stream_events`` gathered whole there), so one test body covers both."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client

    @property
    def sync(self) -> bool:
        return isinstance(self.client, Client)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        if inspect.iscoroutinefunction(method):
            return method  # type: ignore[no-any-return]

        async def in_thread(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(functools.partial(method, *args, **kwargs))

        return in_thread

    async def streamed(self, task_id: UUID | str) -> list[Event]:
        """Every event ``stream_events`` gives, to its end."""
        if isinstance(self.client, Client):
            client = self.client
            return await asyncio.to_thread(lambda: list(client.stream_events(task_id)))
        return [e async for e in self.client.stream_events(task_id)]

    async def close(self) -> None:
        if isinstance(self.client, Client):
            self.client.close()
        else:
            await self.client.close()


def unique(prefix: str) -> str:
    """A task type (or name) no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def claim(driver: AsyncQueue, task_type: str) -> Task:
    """Admit what is pending and claim the one queued task of ``task_type``."""
    await driver.admit()
    [claimed] = await driver.claim(1, "test-worker", task_types=[task_type])
    assert claimed.lock_token is not None
    return claimed


async def finish(driver: AsyncQueue, claimed: Task, kind: OutcomeKind, **more: Any) -> Task:
    """End the claimed attempt with ``kind`` (and ``more`` of the Outcome)."""
    logs = more.pop("logs", ())
    assert claimed.lock_token is not None
    outcome = Outcome(claimed.id, claimed.lock_token, kind, claimed=claimed, **more)
    done = await driver.finish([outcome], logs=logs)
    task = done[claimed.id]
    assert isinstance(task, Task), task
    return task


def log_line(task: Task, text: str, stream: str = "stdout") -> LogRecord:
    """One captured line of ``task``'s first attempt."""
    return LogRecord(task.id, task.tenant, 1, stream, datetime.now(UTC), text)
