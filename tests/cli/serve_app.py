"""A queue with one handler, for ``agentqueue serve --app serve_app:queue`` in tests."""

from __future__ import annotations

import os
from typing import Any

from agentqueue import AsyncQueue, Task, TaskContext

queue = AsyncQueue(os.environ.get("AGENTQUEUE_DB"))


@queue.handler("echo")
async def echo(task: Task, ctx: TaskContext) -> Any:
    """Hand the payload back as the result."""
    return {"echo": task.payload}
