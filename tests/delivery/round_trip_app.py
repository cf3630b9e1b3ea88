"""The app the GitHub round-trip test serves: a bugfix handler that says what it did."""

from __future__ import annotations

from typing import Any

from agentqueue import Queue

queue = Queue()


@queue.handler("bugfix")
async def fix(task: Any, ctx: Any) -> dict[str, Any]:
    """Complete with a summary naming the issue it was given."""
    return {"summary": f"fixed: {task.payload['title']}"}
