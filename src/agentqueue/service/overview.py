"""The queue at a glance, for the dashboard: tasks ended per time slot, queue and run latencies
(p50 and p99), workers holding work, the leader, the outbox backlog and the paused types.

Every figure is read from the database, so it is the queue's truth across every process that
shares it. Latency percentiles are taken over a sample: the newest ``SAMPLE`` tasks that ran and
ended in the window (exact below that many).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..domain.metrics import ENDINGS, LIVE_STATES
from ..domain.states import TaskState
from ..store.base import BusyWorker, EndedCount, EndedTimes, LeaderInfo, PausedType, WorkerSlots
from .reads import AgentLoad, agent_loads
from .records import LEADERSHIP
from .runtime import Runtime

SAMPLE = 2000
"""How many of the newest ended tasks a window's latency percentiles are taken over."""


@dataclass(frozen=True)
class Slot:
    """One time slot of a window: its start, the tasks that ended in it, and the latencies of
    the sampled ones (seconds; None when none was sampled)."""

    start: datetime
    completed: int
    other_ends: int
    wait_p50: float | None
    wait_p99: float | None
    run_p50: float | None
    run_p99: float | None


@dataclass(frozen=True)
class Window:
    """A stretch of recent time cut into equal slots."""

    name: str
    since: datetime
    slot_secs: int
    slots: list[Slot]
    sampled: int

    @property
    def completed(self) -> int:
        """Tasks completed in the window."""
        return sum(s.completed for s in self.slots)

    @property
    def other_ends(self) -> int:
        """Tasks that ended otherwise (failed, dead-lettered, cancelled...) in the window."""
        return sum(s.other_ends for s in self.slots)


@dataclass(frozen=True)
class Overview:
    """What the overview page shows."""

    now: datetime
    depth: dict[TaskState, int]
    """Live tasks in each live state (from the metrics rollup on PostgreSQL: no scan)."""
    ended: dict[str, int]
    """Tasks ended by how, since the metrics began counting (the ``agent_tasks_total``
    counters: never fewer, whatever retention removes)."""
    windows: list[Window]
    agents: list[AgentLoad]
    workers: list[WorkerSlots]
    """Every worker that has reported its slots, newest heartbeat first."""
    holding: dict[str, BusyWorker]
    """Workers holding executing tasks, by name (one that stopped reporting may still)."""
    leader: LeaderInfo | None
    outbox_backlog: int
    paused: list[PausedType]


WINDOWS = (("last hour", timedelta(hours=1), 300), ("last day", timedelta(days=1), 3600))
"""Each window's name, length and slot length in seconds (each slot length a multiple of
``FINE_SECS``, each length a multiple of its slot length)."""

FINE_SECS = 300
"""The slot length the database counts in; every window's slots are sums of these."""


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``values`` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


async def windows(rt: Runtime, tenant: str | None = None) -> list[Window]:
    """Tasks ended per slot and latencies per slot over each of ``WINDOWS``, from one grouped
    count and one sample over the longest (the table is read twice, not twice per window)."""
    now = rt.clock.now()
    # Slots end at the next whole FINE_SECS, so a slot's figures do not shift between reads.
    epoch_secs = math.ceil(now.timestamp() / FINE_SECS) * FINE_SECS
    end = datetime.fromtimestamp(epoch_secs, now.tzinfo)
    longest = max(length for _name, length, _secs in WINDOWS)
    since = end - longest
    counts = await rt.store.ended_counts(since, FINE_SECS, tenant)
    sample = await rt.store.ended_sample(since, SAMPLE, tenant)
    return [
        _window(name, end - length, slot_secs, int(length.total_seconds()), since, counts, sample)
        for name, length, slot_secs in WINDOWS
    ]


def _window(
    name: str,
    start: datetime,
    slot_secs: int,
    length_secs: int,
    since: datetime,
    counts: list[EndedCount],
    sample: list[EndedTimes],
) -> Window:
    count = length_secs // slot_secs
    offset = int((start - since).total_seconds())
    completed = [0] * count
    other = [0] * count
    for row in counts:
        at = (row.slot * FINE_SECS - offset) // slot_secs
        if 0 <= at < count:
            if row.state == TaskState.COMPLETED.value:
                completed[at] += row.count
            else:
                other[at] += row.count
    waits: list[list[float]] = [[] for _ in range(count)]
    runs: list[list[float]] = [[] for _ in range(count)]
    sampled = 0
    for times in sample:
        at = int((times.finished_at - start).total_seconds() // slot_secs)
        if 0 <= at < count:
            sampled += 1
            waits[at].append((times.started_at - times.created_at).total_seconds())
            runs[at].append((times.finished_at - times.started_at).total_seconds())
    slots = [
        Slot(
            start + timedelta(seconds=slot_secs * i),
            completed[i],
            other[i],
            percentile(waits[i], 0.5),
            percentile(waits[i], 0.99),
            percentile(runs[i], 0.5),
            percentile(runs[i], 0.99),
        )
        for i in range(count)
    ]
    return Window(name, start, slot_secs, slots, sampled)


async def overview(rt: Runtime, tenant: str | None = None) -> Overview:
    """Everything the overview page shows, for ``tenant`` (None: every tenant). Agents,
    workers, the leader and the paused types are the whole queue's (they belong to no
    tenant). The reads are independent, so they run at once (on PostgreSQL, each on a
    connection of its own): the page takes as long as the slowest, not their sum."""
    # The reads that may take longest run at once; the small ones follow.
    snapshot, found, agents = await asyncio.gather(
        rt.store.metrics(by_tenant=tenant is not None), windows(rt, tenant), agent_loads(rt)
    )
    depth = dict.fromkeys(LIVE_STATES, 0)
    for (owner, state), n in snapshot.depth.items():
        if (tenant is None or owner == tenant) and state in depth:
            depth[state] += n
    ended = dict.fromkeys(ENDINGS, 0)
    for count in snapshot.counts:
        mine = tenant is None or count.tenant == tenant
        if mine and count.metric == "ended" and count.label in ended:
            ended[count.label] += count.n
    return Overview(
        now=rt.clock.now(),
        depth=depth,
        ended=ended,
        windows=found,
        agents=agents,
        workers=sorted(snapshot.workers, key=lambda w: w.heartbeat_at, reverse=True),
        holding={w.worker: w for w in await rt.store.busy_workers()},
        leader=await rt.store.leader(LEADERSHIP),
        outbox_backlog=await rt.store.outbox_backlog(tenant),
        paused=await rt.store.paused(),
    )
