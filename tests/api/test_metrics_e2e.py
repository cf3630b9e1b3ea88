"""``/metrics`` tells the queue's truth across processes: 500 tasks through three real worker
processes on PostgreSQL, scraped at a separate API process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from http_server import AGENTQUEUE, MAIN_API_SETTINGS, ApiServer, clean_env, run_sql, running_server
from prometheus_client.parser import text_string_to_metric_families

from agentqueue import AsyncQueue, TaskState
from fast_config import fast_config

WORKER_DIR = Path(__file__).parent.parent / "worker"

CONFIG = fast_config(grace_secs=2)

COMPLETE, TIME_OUT, DEAD_LETTER, DEAD_RETRIES = 480, 10, 10, 2
SLOW = {"task_type": "sleep", "payload": {"secs": 30}, "timeout_secs": 1, "max_retries": 0}
"""Stopped at its 1 s timeout, no retry: dead-lettered as a timeout."""
BAD = {"task_type": "fail", "payload": {"retryable": True}, "max_retries": DEAD_RETRIES}
"""Fails retryably every time: dead-lettered after its retries."""


@pytest.fixture
def pg_server(tmp_path: Path) -> Iterator[ApiServer]:
    """An API process over a fresh PostgreSQL database, with fast retries."""
    with running_server("postgres", tmp_path / "api", MAIN_API_SETTINGS, CONFIG) as server:
        yield server


def scrape(server: ApiServer, secret: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The samples of every family in one scrape, parsed by prometheus_client's own parser."""
    with server.client(secret) as http:
        answer = http.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(answer.text)
    }


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        value
        for sample, have, value in samples
        if sample == name and all(have.get(k) == v for k, v in labels.items())
    )


@pytest.mark.postgres
async def test_scraped_counters_equal_what_three_workers_did_to_500_tasks(
    pg_server: ApiServer, tmp_path: Path
) -> None:
    server = pg_server
    async with server.queue() as q:
        await q.submit_many(
            [{"title": f"ok {i}", "task_type": "echo", "payload": {}} for i in range(COMPLETE)]
            + [SLOW | {"title": f"slow {i}"} for i in range(TIME_OUT)]
            + [BAD | {"title": f"bad {i}"} for i in range(DEAD_LETTER)]
        )
        workers = [_start_worker(server, tmp_path, n) for n in range(3)]
        try:
            await _wait_ended(q, COMPLETE + TIME_OUT + DEAD_LETTER)
            stats = (await q.stats()).by_state
            # Only an admin token covers every tenant today.
            families = scrape(server, server.admin_secret)
            slots = _wait_slots(server, server.admin_secret, 3)
        finally:
            for proc, _ in workers:
                proc.terminate()
            for proc, log in workers:
                assert proc.wait(30) == 0, log.read_text()

    tasks = families["agent_tasks"]
    assert total(tasks, "agent_tasks_total", status="completed") == COMPLETE
    assert total(tasks, "agent_tasks_total", status="timeout") == TIME_OUT
    assert total(tasks, "agent_tasks_total", status="dead_letter") == DEAD_LETTER
    assert total(tasks, "agent_tasks_total", status="failed") == 0
    assert total(tasks, "agent_tasks_total", status="cancelled") == 0
    assert total(tasks, "agent_tasks_total", status="completed", task_type="echo") == COMPLETE

    ended = COMPLETE + TIME_OUT + DEAD_LETTER
    latency = families["agent_queue_latency_seconds"]
    assert total(latency, "agent_queue_latency_seconds_count") == ended
    assert total(latency, "agent_queue_latency_seconds_bucket", le="+Inf") == ended
    completion = families["agent_queue_completion_time_seconds"]
    assert total(completion, "agent_queue_completion_time_seconds_count") == ended
    # The timed-out attempts ran a second before they were stopped.
    assert total(completion, "agent_queue_completion_time_seconds_bucket", le="0.5") <= (
        ended - TIME_OUT
    )

    [[recorded]] = run_sql(
        server.db_url, "SELECT count(*) FROM aq_events WHERE data::jsonb ? 'retry'"
    )
    assert recorded == DEAD_LETTER * DEAD_RETRIES
    assert total(families["agent_retries"], "agent_retries_total") == recorded

    depth = {labels["status"]: value for _, labels, value in families["agent_queue_depth"]}
    for state in (s for s in TaskState if not s.terminal and s is not TaskState.ARCHIVED):
        assert depth[state.value] == stats.get(state, 0), state
    assert depth["dead_letter"] == TIME_OUT + DEAD_LETTER
    assert total(families["agent_scheduler_leader_term"], "agent_scheduler_leader_term") >= 1
    assert len({labels["worker"] for _, labels, _ in slots}) == 3


def _start_worker(server: ApiServer, tmp_path: Path, n: int) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / f"worker-{n}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [AGENTQUEUE, "--db", server.db_url, "--config", str(server.config_path), "worker",
             "--app", "worker_app:queue", "--concurrency", "20", "--id", f"metrics-{n}"],
            cwd=WORKER_DIR, env=clean_env(AGENTQUEUE_DB=server.db_url, PYTHONUNBUFFERED="1"),
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    return proc, log


async def _wait_ended(q: AsyncQueue, n: int, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while True:
        counts = (await q.stats()).by_state
        done = sum(v for s, v in counts.items() if s.terminal) + counts.get(
            TaskState.DEAD_LETTER, 0
        )
        if done == n:
            return
        assert time.monotonic() < deadline, f"not all {n} tasks ended: {counts}"
        await asyncio.sleep(0.2)


def _wait_slots(
    server: ApiServer, secret: str, workers: int, within: float = 30.0
) -> list[tuple[str, dict[str, str], float]]:
    """The worker slot samples once ``workers`` workers have recorded theirs (a scrape is
    cached for a second: this polls past it)."""
    deadline = time.monotonic() + within
    while True:
        slots = scrape(server, secret).get("agent_worker_slots", [])
        if len({labels["worker"] for _, labels, _ in slots}) >= workers:
            return slots
        assert time.monotonic() < deadline, f"worker slots: {slots}"
        time.sleep(0.5)


@pytest.mark.postgres
def test_metrics_need_an_operator_token_covering_every_tenant(pg_server: ApiServer) -> None:
    server = pg_server
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        assert anonymous.get("/metrics").status_code == 401
    bound = server.api_token("operator", tenant="acme")
    with server.client(bound) as http:
        assert http.get("/metrics").status_code == 403
