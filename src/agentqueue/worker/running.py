"""One attempt in progress on this worker, as the worker's parts see it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..domain.models import Task
from ..executors.base import AttemptControl, Executor


@dataclass
class Running:
    """A claimed task being run. ``renewed_at`` is the ``time.monotonic()`` instant its lease
    was last known extended (the claim or heartbeat was sent then, so the lease runs at least
    ``lease_ttl_secs`` from there)."""

    task: Task
    executor: Executor
    control: AttemptControl
    renewed_at: float
    job: asyncio.Task[None] | None = None
