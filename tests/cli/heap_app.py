"""A handler that reports the cyclic collector's frozen generation of the process it runs in
(``worker --app heap_app:queue``; see test_worker_heap.py)."""

from __future__ import annotations

import gc
import os
from typing import Any

from agentqueue import AsyncQueue, Task, TaskContext

queue = AsyncQueue(os.environ.get("AGENTQUEUE_DB"))
COLLECTING_AT_IMPORT = gc.isenabled()
"""Whether the collector ran as the worker loaded this module, during its start."""


@queue.handler("heap")
async def heap(task: Task, ctx: TaskContext) -> Any:
    """How many objects the process has frozen out of the collector's reach, how often its
    collector runs, and whether it runs at all."""
    return {
        "frozen": gc.get_freeze_count(),
        "threshold": list(gc.get_threshold()),
        "collecting": gc.isenabled(),
        "collecting_at_import": COLLECTING_AT_IMPORT,
    }
