"""``worker --metrics-port``: this worker process's own metrics over HTTP (prometheus_client's
server, in a thread of its own): its slots, claims and how the tasks it claimed ended, beside
the process collector's CPU, memory and file descriptors. The queue's figures are at ``/metrics``
of the API server; these are one process's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector


class _Observed(Protocol):
    id: str

    @property
    def running(self) -> int: ...

    @property
    def stats(self) -> dict[str, int]: ...

    @property
    def concurrency(self) -> int: ...


class WorkerCollector(Collector):
    """Reads the worker's counters at each scrape (plain ints: safe from another thread)."""

    def __init__(self, worker: _Observed) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        """The worker's metrics now."""
        w = self.worker
        stats = w.stats
        slots = GaugeMetricFamily(
            "agentqueue_worker_slots",
            "This worker's executor slots, busy or free.",
            labels=["worker", "state"],
        )
        busy = w.running
        slots.add_metric([w.id, "busy"], busy)
        slots.add_metric([w.id, "free"], max(0, w.concurrency - busy))
        yield slots
        claims = CounterMetricFamily(
            "agentqueue_worker_claims", "Claim statements this worker made.", labels=["worker"]
        )
        claims.add_metric([w.id], stats.get("claims", 0))
        yield claims
        claimed = CounterMetricFamily(
            "agentqueue_worker_tasks_claimed",
            "Tasks this worker claimed in its run.",
            labels=["worker"],
        )
        claimed.add_metric([w.id], stats.get("tasks", 0))
        yield claimed
        ended = GaugeMetricFamily(
            "agentqueue_worker_tasks",
            "Tasks this worker claimed, by how they stand now (as its run summary counts them).",
            labels=["worker", "outcome"],
        )
        for name, value in sorted(stats.items()):
            if name not in ("tasks", "claims", "guarded", "tool_calls", "retried_attempts"):
                ended.add_metric([w.id, name], value)
        yield ended
        guarded = CounterMetricFamily(
            "agentqueue_worker_lease_guard_stops",
            "Attempts this worker stopped because its heartbeats kept failing.",
            labels=["worker"],
        )
        guarded.add_metric([w.id], stats.get("guarded", 0))
        yield guarded


def serve_worker_metrics(worker: _Observed, host: str, port: int) -> tuple[Any, int]:
    """Serve ``worker``'s metrics and the process collector's at ``http://host:port/metrics``
    (port 0: one the system picks); return the server (``shutdown()`` stops it) and its port."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(WorkerCollector(worker))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server, int(server.server_port)
