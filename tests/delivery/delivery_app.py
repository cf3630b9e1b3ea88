"""The app the delivery tests' worker processes run: one handler that completes at once."""

from __future__ import annotations

from typing import Any

from agentqueue import Queue

queue = Queue()


@queue.handler("callback-test")
async def done(task: Any, ctx: Any) -> dict[str, Any]:
    """Complete with a small result."""
    return {"ok": True}
