"""The Prometheus exposition of the queue (R19), read from the database at scrape.

The counters and histograms are the sums of the rollup the database keeps in the transaction of
every change it counts (migration 0012), so every process sharing the database reports the same
figures; the gauges are counts over partial indexes. A scrape within ``[metrics] cache_secs`` of
the last one is answered from it.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..domain import metrics as m
from ..domain.states import TaskState
from ..store.base import MetricCount, MetricSnapshot
from .runtime import Runtime

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format's content type."""


def families(snap: MetricSnapshot, tenant_label: bool, now: float) -> list[Metric]:
    """The metric families of one snapshot (``now``: the clock's reading, epoch seconds)."""
    who = ["tenant"] if tenant_label else []
    labels = ["task_type", "agent", *who]

    def key(c: MetricCount) -> tuple[str, ...]:
        return (c.task_type, c.agent, *((c.tenant,) if tenant_label else ()))

    depth = GaugeMetricFamily(m.DEPTH, m.HELP[m.DEPTH], labels=["status", *who])
    by_tenant: dict[str, dict[TaskState, int]] = defaultdict(dict)
    for (tenant, state), count in snap.depth.items():
        by_tenant[tenant][state] = count
    for tenant in sorted(by_tenant or {"": {}}):
        for state in m.LIVE_STATES:
            depth.add_metric(
                [state.value, *((tenant,) if tenant_label else ())],
                by_tenant[tenant].get(state, 0),
            )

    tasks = CounterMetricFamily(m.TASKS, m.HELP[m.TASKS], labels=["status", *labels])
    retries = CounterMetricFamily(m.RETRIES, m.HELP[m.RETRIES], labels=labels)
    lapses = CounterMetricFamily(m.LEASE_LAPSES, m.HELP[m.LEASE_LAPSES], labels=["reason", *labels])
    buckets: dict[str, dict[tuple[str, ...], list[int]]] = {"latency": {}, "completion": {}}
    sums: dict[str, dict[tuple[str, ...], float]] = {"latency": {}, "completion": {}}
    # Rows differ by tenant even without the tenant label: add them up first.
    counters: dict[tuple[str, str, tuple[str, ...]], int] = defaultdict(int)
    for c in snap.counts:
        if c.metric in buckets:
            per = buckets[c.metric].setdefault(key(c), [0] * (len(m.BUCKETS) + 1))
            per[min(int(c.label), len(m.BUCKETS))] += c.n
            sums[c.metric][key(c)] = sums[c.metric].get(key(c), 0.0) + c.total
        else:
            counters[(c.metric, c.label, key(c))] += c.n
    for (metric, label, k), n in sorted(counters.items()):
        if metric == "ended":
            tasks.add_metric([label, *k], n)
        elif metric == "retry":
            retries.add_metric(list(k), n)
        elif metric == "lapse":
            lapses.add_metric([label, *k], n)

    out: list[Metric] = [depth, tasks, retries, lapses]
    for metric, name in (("latency", m.LATENCY), ("completion", m.COMPLETION)):
        family = HistogramMetricFamily(name, m.HELP[name], labels=labels)
        for k, per in sorted(buckets[metric].items()):
            family.add_metric(list(k), _cumulative(per), sums[metric][k])
        out.append(family)

    oldest = GaugeMetricFamily(m.OLDEST_QUEUED, m.HELP[m.OLDEST_QUEUED])
    since = snap.oldest_queued_since
    oldest.add_metric([], 0.0 if since is None else max(0.0, now - since.timestamp()))
    outbox = GaugeMetricFamily(m.OUTBOX_BACKLOG, m.HELP[m.OUTBOX_BACKLOG], labels=["kind"])
    for kind, count in sorted(snap.outbox.items()):
        outbox.add_metric([kind], count)
    term = GaugeMetricFamily(m.LEADER_TERM, m.HELP[m.LEADER_TERM])
    term.add_metric([], snap.leader_term)
    waiting = GaugeMetricFamily(m.TOOL_CALLS_WAITING, m.HELP[m.TOOL_CALLS_WAITING])
    waiting.add_metric(
        [],
        sum(n for (_, state), n in snap.depth.items() if state is TaskState.WAITING_TOOL),
    )
    slots = GaugeMetricFamily(m.WORKER_SLOTS, m.HELP[m.WORKER_SLOTS], labels=["worker", "state"])
    heartbeat = GaugeMetricFamily(m.WORKER_HEARTBEAT, m.HELP[m.WORKER_HEARTBEAT], labels=["worker"])
    for w in snap.workers:
        slots.add_metric([w.name, "busy"], w.busy)
        slots.add_metric([w.name, "free"], max(0, w.slots - w.busy))
        heartbeat.add_metric([w.name], max(0.0, now - w.heartbeat_at.timestamp()))
    out += [oldest, outbox, term, waiting, slots, heartbeat]
    return out


def _cumulative(per_bucket: list[int]) -> list[tuple[str, float]]:
    total, out = 0, []
    for index, n in enumerate(per_bucket):
        total += n
        out.append((_le(m.bucket_bound(index)), float(total)))
    return out


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class _Fixed(Collector):
    def __init__(self, found: Iterable[Metric]) -> None:
        self._found = list(found)

    def collect(self) -> Iterator[Metric]:
        return iter(self._found)


def render(found: Iterable[Metric]) -> bytes:
    """The families in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(found))
    return generate_latest(registry)


async def exposition(rt: Runtime) -> bytes:
    """The queue's metrics now, read from the database (no cache)."""
    tenant_label = rt.settings.metrics.tenant_label
    snap = await rt.store.metrics(by_tenant=tenant_label)
    return render(families(snap, tenant_label, rt.clock.now().timestamp()))


class Scraper:
    """Answers scrapes, from the last one if it is younger than ``[metrics] cache_secs``
    (concurrent scrapes share one read)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._last: tuple[float, bytes] | None = None
        self._lock = asyncio.Lock()

    async def scrape(self, fresh: bool = False) -> bytes:
        """The exposition; ``fresh`` reads the database whatever the cache holds."""
        ttl = self.rt.settings.metrics.cache_secs
        async with self._lock:
            last = self._last
            if not fresh and last is not None and time.monotonic() - last[0] < ttl:
                return last[1]
            body = await exposition(self.rt)
            self._last = (time.monotonic(), body)
            return body
