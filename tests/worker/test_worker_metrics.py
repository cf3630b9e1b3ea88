"""``worker --metrics-port``: a worker process serves its own metrics (slots, claims, how its
tasks ended, the process collector's figures) in the Prometheus text format."""

from __future__ import annotations

import asyncio
import re
import signal
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from worker_helpers import ended, wait_for

from agentqueue import AsyncQueue

LISTENING = re.compile(r"metrics listening on (http://[0-9.]+:\d+/metrics)")


def _address(worker, within: float = 30.0) -> str:
    deadline = time.monotonic() + within
    while True:
        found = LISTENING.search(worker.output())
        if found:
            return found.group(1)
        assert worker.proc.poll() is None, worker.output()
        assert time.monotonic() < deadline, worker.output()
        time.sleep(0.05)


def _samples(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = httpx.get(url, timeout=30).text
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((s.labels, s.value))
    return found


async def test_a_worker_serves_its_own_slots_claims_and_process_metrics(
    live_queue: AsyncQueue, start_worker
) -> None:
    worker = start_worker("--concurrency", "3", "--id", "w-metrics", "--metrics-port", "0")
    url = _address(worker)
    await live_queue.submit_many(
        [{"title": f"t{i}", "task_type": "echo", "payload": {}} for i in range(5)]
    )
    await wait_for(live_queue, lambda c: ended(c, 5), what="5 tasks")
    deadline = time.monotonic() + 30
    while True:
        found = _samples(url)
        done = dict(
            (labels["outcome"], value) for labels, value in found["agentqueue_worker_tasks"]
        )
        if done.get("completed") == 5:
            break
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.2)
    slots = {labels["state"]: value for labels, value in found["agentqueue_worker_slots"]}
    assert slots["busy"] + slots["free"] == 3
    assert found["agentqueue_worker_claims_total"][0][1] >= 1
    assert found["agentqueue_worker_tasks_claimed_total"][0][1] == 5
    assert found["process_resident_memory_bytes"][0][1] > 0
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
