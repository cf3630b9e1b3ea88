"""Handlers for the ``--until-idle`` tests (``worker --app idle_app:queue``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agentqueue import AsyncQueue, Retryable, Task, TaskContext

queue = AsyncQueue(os.environ.get("AGENTQUEUE_DB"))


@queue.handler("flaky")
async def flaky(task: Task, ctx: TaskContext) -> Any:
    """Fail (retryably) on the first attempt, complete on the next."""
    if task.retry_count == 0:
        raise Retryable("first attempt fails")
    return {"attempts": 2}


@queue.handler("slow")
async def slow(task: Task, ctx: TaskContext) -> Any:
    """Run for a while, so that everything else is done while it executes."""
    await asyncio.sleep(float(task.payload["secs"]))
    return {"slept": task.payload["secs"]}


@queue.handler("step")
async def step(task: Task, ctx: TaskContext) -> Any:
    """Complete at once."""
    return {}


@queue.handler("docs")
async def docs(task: Task, ctx: TaskContext) -> Any:
    """Complete at once (its type is paused in the tests)."""
    return {}


@queue.handler("translate")
async def translate(task: Task, ctx: TaskContext) -> Any:
    """Complete at once (left out by --task-types in the tests)."""
    return {}
