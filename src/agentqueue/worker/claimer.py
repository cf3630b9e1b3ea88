"""The claimer: claims work for the executors' free slots, in batches, a few claims at once.

An executor whose last claim came back short is left alone until new work is announced (a
notice) or the slow poll finds work queued. While the database is away, claims stop; the poll
keeps trying, with a growing pause, and claiming resumes when it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import KW_ONLY, dataclass, field
from uuid import UUID

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..domain.models import Task
from ..executors.base import Executor
from ..store.base import Later, WorkHints
from ..supervise import Outage, Supervisor
from . import transitions
from .running import Running

log = logging.getLogger("agentqueue.worker")

Claim = Callable[[int, Sequence[str], Sequence[str]], Awaitable[list[Task]]]
"""Claim up to n tasks of these task types for these agents."""
ClaimLater = Callable[[int, Sequence[str], Sequence[str]], Awaitable[Later[list[Task]]]]
"""The same inside an admission's transaction: the claimed tasks arrive with its commit."""
Start = Callable[[Task, Executor, float], None]
"""Start running a claimed task (given when its claim was sent, ``time.monotonic()``)."""


def serves(executor: Executor, agents: AbstractSet[str | None]) -> bool:
    """Whether ``executor`` can run work routed to ``agents`` (None: to no agent, which the
    handlers run): an agent's executor is named after it."""
    return executor.name in agents or (None in agents and not executor.agents)


# A part of the worker: its fields are what it is given (kw-only from ``concurrency`` on); it
# keeps identity equality and the plain object repr.
@dataclass(eq=False, repr=False)
class Claimer:
    """Keeps the executors' slots filled."""

    claim: Claim
    work_hints: Callable[[], Awaitable[WorkHints]]
    executors: Sequence[Executor]
    running: Mapping[UUID, Running]
    start: Start
    jobs: Supervisor
    _: KW_ONLY
    concurrency: int
    batch: int
    in_flight: int
    on_dry: Callable[[], None]
    on_claimed: Callable[[], None]
    claims_admit: bool = False
    """Claims admit pending tasks too (Settings.claims_admit): pending work is work."""
    claimed: int = field(default=0, init=False)
    _reserved: dict[str, int] = field(init=False)
    _empty: set[str] = field(default_factory=set, init=False)
    _probing: set[str] = field(init=False)
    """Executors whose last claim came back short: one claim at a time until one comes back
    full (a notice of one task is then one claim, not ``in_flight`` of them racing for it)."""
    _dry_seen: dict[str, float] = field(default_factory=dict, init=False)
    """When each executor's last claim came back short (``time.monotonic()``)."""
    _flying: dict[str, int] = field(init=False)
    _news: dict[str, int] = field(init=False)
    """How many times news of work (a notice, the poll) reached each executor: a claim that
    comes back short leaves its executor waiting for news only if none came meanwhile."""
    _claiming: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _outage: Outage = field(default_factory=lambda: Outage(log), init=False)
    _next_poll: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.executors = list(self.executors)  # a list of its own, whatever it was given
        self._reserved = {e.name: 0 for e in self.executors}
        self._flying = {e.name: 0 for e in self.executors}
        self._news = {e.name: 0 for e in self.executors}
        self._probing = {e.name for e in self.executors}  # nothing known of the queue yet

    @property
    def claiming(self) -> set[asyncio.Task[None]]:
        """Claims under way."""
        return self._claiming

    def work_arrived(self, agents: AbstractSet[str | None] | None = None) -> None:
        """News of queued work: every executor may claim again, or, when the news says the
        work was routed to ``agents`` (None among them: to no agent), the executors that can
        take it (an executor of other agents would claim nothing, after a walk over the queue)."""
        for executor in self.executors:
            if agents is None or serves(executor, agents):
                self._empty.discard(executor.name)
                self._news[executor.name] += 1

    def _free(self, executor: Executor) -> int:
        """Slots ``executor`` may claim for now: its own, within the worker's, up to a batch."""
        free_total = self.concurrency - len(self.running) - sum(self._reserved.values())
        busy = sum(1 for r in self.running.values() if r.executor is executor)
        return min(
            executor.max_concurrent - busy - self._reserved[executor.name], free_total, self.batch
        )

    def fill(self) -> None:
        """Start claims for executors with free slots: batches of ``batch``, at most
        ``in_flight`` at once, so the database works on one while the worker handles
        another; one at a time for an executor whose last claim came back short."""
        for executor in self.executors:
            while len(self._claiming) < self.in_flight and executor.name not in self._empty:
                if executor.name in self._probing and self._flying[executor.name]:
                    break
                free = self._free(executor)
                if free <= 0:
                    break
                self._reserved[executor.name] += free
                self._flying[executor.name] += 1
                name = f"agentqueue-claim-{executor.name}"
                job = self.jobs.start(self._claim(executor, free), name)
                self._claiming.add(job)
                job.add_done_callback(self._claiming.discard)

    async def _claim(self, executor: Executor, n: int) -> None:
        sent = time.monotonic()
        news = self._news[executor.name]
        try:
            tasks = await self.claim(n, sorted(executor.task_types), sorted(executor.agents))
        except StoreUnavailable as exc:
            self._empty.add(executor.name)  # until the poll finds the database and work again
            pause = self._outage.failed(exc, "claiming")
            self._next_poll = time.monotonic() + pause
            return
        except AgentQueueError as exc:
            log.warning("claim failed, will retry: %s", exc)
            self._empty.add(executor.name)  # until the next poll
            return
        finally:
            self._reserved[executor.name] -= n
            self._flying[executor.name] -= 1
        self._outage.ok("claiming")
        self._begin(executor, tasks, sent)  # committed: the claim returned
        if len(tasks) < n:
            self._probing.add(executor.name)
            self._dry_seen[executor.name] = time.monotonic()
            # Waiting for news, unless news came while the claim was under way (work committed
            # after its snapshot, announced before its answer: left waiting, it would wait for
            # the poll).
            if self._news[executor.name] == news:
                self._empty.add(executor.name)
            self.on_dry()  # the queue ran dry here: admit what is pending
        elif sent > self._dry_seen.get(executor.name, float("-inf")):
            # More may be waiting: claims in flight again. A full claim sent before a short
            # one came back says nothing newer than it: it does not end the probing.
            self._probing.discard(executor.name)
        self.on_claimed()

    def _begin(self, executor: Executor, tasks: list[Task], sent: float) -> None:
        """Start the committed claims of ``executor`` (sent at ``sent``)."""
        self.claimed += len(tasks)
        transitions.claimed(tasks)
        for task in tasks:
            self.start(task, executor, sent)

    async def claim_within(
        self, claim_in: ClaimLater, agents: frozenset[str | None]
    ) -> Callable[[bool], None]:
        """Claim with ``claim_in`` (inside an admission's transaction) for the free slots of
        the executors that can run what it admitted: those of ``agents``, and the handlers when
        it holds None (tasks routed to no agent). Their slots stay held until the returned call
        says how the transaction ended: committed, the tasks start; else they are dropped (the
        claims rolled back with it)."""
        sent = time.monotonic()
        held: list[tuple[Executor, int, Later[list[Task]] | None]] = []
        try:
            for executor in self.executors:
                if not serves(executor, agents):
                    continue
                free = self._free(executor)
                if free <= 0:
                    continue
                self._reserved[executor.name] += free
                held.append((executor, free, None))
                claimed = await claim_in(free, sorted(executor.task_types), sorted(executor.agents))
                held[-1] = (executor, free, claimed)
        except BaseException:
            for executor, n, _ in held:
                self._reserved[executor.name] -= n
            raise

        def end(committed: bool) -> None:
            for executor, n, claimed in held:
                self._reserved[executor.name] -= n
                if committed and claimed is not None:
                    # The claim went with the admission's COMMIT: its answer is here.
                    self._begin(executor, claimed.result(), sent)
            if committed:
                # What the claims left queued is for these executors alone (its notice says so
                # to every worker): they claim again as their slots free up. (Even after a
                # claim here that came back short: that claim of nothing, and the admission
                # pass it wakes, leave the next dispatch faster; benchmarks/HISTORY.md.)
                self.work_arrived(agents)
            if committed and held:
                self.on_claimed()

        return end

    async def poll(self) -> None:
        """The safety net behind notifications: if anything is queued, look again everywhere
        (one read; nothing is written while the queue is idle)."""
        if not self._empty or time.monotonic() < self._next_poll:
            return
        try:
            hints = await self.work_hints()
        except StoreUnavailable as exc:
            self._next_poll = time.monotonic() + self._outage.failed(exc, "claiming")
            return
        except AgentQueueError:
            return
        self._outage.ok("claiming")
        if hints.queued or (self.claims_admit and hints.admissible):
            self.work_arrived()
