"""Tasks put in a given state on a server's database from the test process, through AsyncQueue
as a worker and the people's commands would (each gets a task type of its own, so a claim
here takes exactly the task meant)."""

from __future__ import annotations

import uuid
from typing import Any

from http_server import HOLD_PATTERN

from agentqueue import AsyncQueue, Task, TaskState
from agentqueue.domain.models import LogRecord
from agentqueue.service.execution import Outcome, OutcomeKind

CALL_ID = "call-1"


def fresh_name(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def queued(q: AsyncQueue, tenant: str, title: str = "api test", **fields: Any) -> Task:
    """A new task of ``tenant`` (queued at once, or blocked when the title asks for approval)."""
    made = await q.submit(title=title, task_type=fresh_name("t"), tenant=tenant, **fields)
    return made.task


async def blocked(q: AsyncQueue, tenant: str) -> Task:
    """A task the test servers' guardrail holds for approval."""
    task = await queued(q, tenant, title=f"{HOLD_PATTERN}: api test")
    assert task.state is TaskState.BLOCKED, task.state
    return task


async def claimed(q: AsyncQueue, tenant: str, **fields: Any) -> Task:
    """A task claimed by a worker called ``api-test-worker`` (executing)."""
    task = await queued(q, tenant, **fields)
    [got] = await q.claim(1, "api-test-worker", task_types=[task.task_type])
    return got


async def waiting(q: AsyncQueue, tenant: str) -> Task:
    """A task waiting on tool call ``CALL_ID``, with a checkpoint."""
    got = await claimed(q, tenant)
    assert got.lock_token is not None
    call = {"id": CALL_ID, "name": "search", "args": {"q": "why"}, "timeout_secs": 600}
    outcome = Outcome(
        got.id, got.lock_token, OutcomeKind.WAITING_TOOL, tool_call=call, claimed=got,
        checkpoint={"step": 1}, checkpointed=True,
    )  # fmt: skip
    done = (await q.finish([outcome]))[got.id]
    assert isinstance(done, Task) and done.state is TaskState.WAITING_TOOL
    return done


async def dead(q: AsyncQueue, tenant: str) -> Task:
    """A dead letter (its one attempt failed, no retries left)."""
    got = await claimed(q, tenant, max_retries=0)
    assert got.lock_token is not None
    task = await q.fail(got.id, got.lock_token, "broke", retryable=True)
    assert task.state is TaskState.DEAD_LETTER, task.state
    return task


async def completed(q: AsyncQueue, tenant: str) -> Task:
    """A completed task with a result and captured output."""
    got = await claimed(q, tenant)
    assert got.lock_token is not None
    logs = [
        LogRecord(got.id, got.tenant, 1, stream, q.clock.now(), f"{stream} line\n")
        for stream in ("stdout", "stderr", "log")
    ]
    outcome = Outcome(
        got.id, got.lock_token, OutcomeKind.COMPLETED, result={"ok": True}, claimed=got
    )
    done = (await q.finish([outcome], logs=logs))[got.id]
    assert isinstance(done, Task) and done.state is TaskState.COMPLETED
    return done


async def failed(q: AsyncQueue, tenant: str) -> Task:
    """A task that failed for good (a non-retryable error)."""
    got = await claimed(q, tenant)
    assert got.lock_token is not None
    task = await q.fail(got.id, got.lock_token, "no such file", retryable=False)
    assert task.state is TaskState.FAILED, task.state
    return task
