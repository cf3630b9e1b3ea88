"""The handler the fault tests' worker processes run (``--app fault_app:queue``).

Every attempt appends ``start <task id> <pid> <monotonic> <wall>`` when it begins and
``end <task id> <pid> <monotonic> <wall> <done|cancelled|failed>`` when it ends to the side-effect
log named by AQ_FAULT_LOG, each line one O_APPEND write, so lines from many processes never mix
(the monotonic clock is the machine's, shared by every process).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from agentqueue import AsyncQueue, Task, TaskContext

queue = AsyncQueue(os.environ.get("AGENTQUEUE_DB"))


def note(what: str, task: Task, extra: str = "") -> None:
    """One line in the side-effect log."""
    line = f"{what} {task.id} {os.getpid()} {time.monotonic():.6f} {time.time():.6f} {extra}"
    fd = os.open(os.environ["AQ_FAULT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.rstrip() + "\n").encode())
    finally:
        os.close(fd)


@queue.handler("work")
async def work(task: Task, ctx: TaskContext) -> dict[str, Any]:
    """Note the start, sleep ``secs`` (a short task by default, a long one when asked), note
    the end."""
    note("start", task)
    how = "failed"
    try:
        await asyncio.sleep(float(ctx.payload.get("secs", 0.05)))
        how = "done"
    except asyncio.CancelledError:
        how = "cancelled"
        raise
    finally:
        note("end", task, how)
    return {"slept": ctx.payload.get("secs", 0.05)}
