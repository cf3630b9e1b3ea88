"""The app the drain benchmark gives ``agentqueue worker --app agentqueue.bench.noop_app:queue``:
a queue with one no-op async handler, written as a user writes one (README, Python). Its
database comes from ``AQ_BENCH_APP_DB``."""

from __future__ import annotations

import os
from typing import Any

import agentqueue

from .names import NOOP

queue = agentqueue.Queue(os.environ.get("AQ_BENCH_APP_DB", "sqlite:///agentqueue.db"))


@queue.handler(NOOP)
async def noop(task: Any, ctx: Any) -> None:
    """Nothing."""
    return None
