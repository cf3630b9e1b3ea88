"""Waiting on tasks without a poll per client: one loop per API process reads every watched
task in one query every ``interval`` seconds (only while someone waits) and wakes the waiters
whose task moved. ``?wait=`` and the event stream both wait here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from uuid import UUID

from ..domain.errors import StoreError
from ..domain.models import Task
from ..service.runtime import Runtime

log = logging.getLogger("agentqueue.api")

POLL_SECS = 0.05
"""How often watched tasks are read: a waiter hears of a change within about this long."""


class TaskWatcher:
    """Wakes waiters when a watched task's audit head (``event_seq``) moves."""

    def __init__(self, rt: Runtime, interval: float = POLL_SECS) -> None:
        self.rt = rt
        self.interval = interval
        self._waiters: dict[UUID, set[asyncio.Event]] = defaultdict(set)
        self._seen: dict[UUID, int] = {}
        self._latest: dict[UUID, Task] = {}
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop (idempotent)."""
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="agentqueue-api-watcher")

    async def stop(self) -> None:
        """Stop the loop."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    @contextlib.contextmanager
    def watching(self, task_id: UUID, seen: int) -> Iterator[asyncio.Event]:
        """Within the block, ``changed`` (yielded) is set whenever the task moves on from
        ``seen``, the audit head (``event_seq``) the caller last read: at once if the watcher
        holds another head for it (most often one it read before this caller came; one the
        caller is ahead of costs the caller a read for nothing), else at the first read that
        finds the head elsewhere."""
        changed = asyncio.Event()
        self._waiters[task_id].add(changed)
        known = self._seen.setdefault(task_id, seen)
        if known != seen:
            changed.set()
        self._wake.set()
        try:
            yield changed
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(changed)
                if not waiters:
                    del self._waiters[task_id]
                    self._seen.pop(task_id, None)
                    self._latest.pop(task_id, None)

    def latest(self, task_id: UUID) -> Task | None:
        """The task as the last read that found it moved saw it (None before, or once it is
        gone), so that a woken waiter need not read it again."""
        return self._latest.get(task_id)

    async def _run(self) -> None:
        failing = False
        while True:
            if not self._waiters:
                self._wake.clear()
                await self._wake.wait()
            ids = list(self._waiters)
            try:
                tasks = await self.rt.store.get_tasks(ids)
            except StoreError as exc:
                if not failing:
                    log.warning("watching tasks: %s; trying again", exc)
                failing = True
                await asyncio.sleep(max(self.interval, 0.5))
                continue
            failing = False
            found = {t.id: t for t in tasks}
            for task_id in ids:
                task = found.get(task_id)
                seq = task.event_seq if task is not None else -1
                if seq != self._seen.get(task_id, seq):
                    self._seen[task_id] = seq
                    if task is None:
                        self._latest.pop(task_id, None)
                    else:
                        self._latest[task_id] = task
                    for event in self._waiters.get(task_id, ()):
                        event.set()
            await asyncio.sleep(self.interval)
