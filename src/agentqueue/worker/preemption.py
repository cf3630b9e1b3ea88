"""Preemption (R11): a P0 task is queued and every slot of an executor that could run it is
busy: that executor's least urgent long-running task is asked to yield its slot.

A moment's wait first: if a worker with a free slot claims the P0 task meanwhile, nothing is
preempted (several busy workers hear of the same task). Which task yields is a domain rule
(:func:`agentqueue.domain.preemption.preemption_victim`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from uuid import UUID

from ..domain.errors import AgentQueueError
from ..domain.preemption import could_run, preemption_victim
from ..executors.base import Executor
from ..supervise import Supervisor
from .running import Running

log = logging.getLogger("agentqueue.worker")

PREEMPT_SETTLE_SECS = 0.2
"""How long a busy worker waits, on news of a queued P0 task, before preempting for it."""

Wanted = Sequence[tuple[str | None, str]]
"""Queued P0 tasks as (agent routed to or None, task type)."""


# A part of the worker: its fields are what it is given (kw-only from ``enabled`` on); it
# keeps identity equality and the plain object repr.
@dataclass(eq=False, repr=False)
class Preemptor:
    """Asks running attempts to yield for queued P0 tasks."""

    executors: Sequence[Executor]
    running: Mapping[UUID, Running]
    queued_p0: Callable[[], Awaitable[Wanted]]
    now: Callable[[], datetime]
    jobs: Supervisor
    _: KW_ONLY
    enabled: bool
    after_secs: float
    min_priority: int
    _job: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.executors = list(self.executors)  # a list of its own, whatever it was given

    def p0_queued(self) -> None:
        """News of a queued P0 task: preempt shortly if it is still waiting then."""
        if not self.enabled or self.victims() == []:
            return
        if self._job is None or self._job.done():
            self._job = self.jobs.start(self._if_still_queued(), "agentqueue-preempt")

    async def _if_still_queued(self) -> None:
        await asyncio.sleep(PREEMPT_SETTLE_SECS)
        try:
            wanted = await self.queued_p0()
        except AgentQueueError:
            return  # the next P0 notice (or poll) tries again
        if wanted:
            for victim in self.victims(wanted):
                log.info("asking task %s (P%d) to yield its slot to a P0 task", victim.task.id,
                         victim.task.priority)  # fmt: skip
                victim.control.request_yield()

    def victims(self, wanted: Wanted | None = None) -> list[Running]:
        """For each executor with every slot busy and none yielding yet (and, given the queued
        P0 tasks, only executors that could run one of them): its attempt to preempt, if one
        qualifies."""
        victims = []
        now = self.now()
        for executor in self.executors:
            if wanted is not None and not could_run(executor.task_types, executor.agents, wanted):
                continue
            mine = [r for r in self.running.values() if r.executor is executor]
            if len(mine) < executor.max_concurrent or any(r.control.yielding.is_set()
                                                          for r in mine):  # fmt: skip
                continue
            task = preemption_victim([r.task for r in mine], now, self.min_priority,
                                     self.after_secs)  # fmt: skip
            if task is not None:
                victims.append(next(r for r in mine if r.task is task))
        return victims
