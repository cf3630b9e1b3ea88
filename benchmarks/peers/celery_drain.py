"""Drain driver for Celery 5.7.0 with Redis: preload N no-op tasks, then one worker process
(prefork, C processes) drains them. Prints one JSON line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python celery_drain.py N C``;
``PEER_REDIS_URL`` names the Redis database (only its ``aq_bench:`` keys are touched).

The drain time runs from the worker's first fetch (the queue gets shorter) until the queue is
empty and nothing is left unacknowledged, so it leaves out the worker's start-up;
``drain_with_start_per_s`` counts from starting the worker process, as the shared script does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from celery_app import BROKER, KEY_PREFIX, QUEUE, app, noop  # noqa: E402


def clean(r: redis.Redis) -> None:
    """Delete every key of this driver."""
    keys = list(r.scan_iter(match=KEY_PREFIX + "*", count=1000))
    if keys:
        r.delete(*keys)


def main(n: int, concurrency: int) -> dict[str, object]:
    """Preload, drain, and report."""
    r = redis.Redis.from_url(BROKER)
    clean(r)
    queue_key, unacked_key = KEY_PREFIX + QUEUE, KEY_PREFIX + "unacked"
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async(producer=producer)
    t1 = time.perf_counter()
    if r.llen(queue_key) != n:
        raise SystemExit(f"expected {n} messages in {queue_key}, found {r.llen(queue_key)}")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "prefork",
         "-c", str(concurrency), "-l", "WARNING",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=HERE,
    )  # fmt: skip
    t2 = time.perf_counter()
    first = None
    try:
        while True:
            waiting, unacked = r.llen(queue_key), r.hlen(unacked_key)
            now = time.perf_counter()
            if first is None and waiting < n:
                first = now
            if waiting == 0 and unacked == 0:
                break
            if worker.poll() is not None:
                raise SystemExit(f"the Celery worker exited with code {worker.returncode}")
            time.sleep(0.01)
        t3 = time.perf_counter()
    finally:
        worker.terminate()
        worker.wait()
        clean(r)
    assert first is not None
    return {
        "system": "celery",
        "n": n,
        "concurrency": concurrency,
        "pool": "prefork",
        "enqueue_per_s": n / (t1 - t0),
        "drain_per_s": n / (t3 - first),
        "drain_secs": t3 - first,
        "drain_with_start_per_s": n / (t3 - t2),
        "worker_start_secs": first - t2,
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
