"""Drain driver for Celery 5.7.0 with Redis: preload N no-op tasks, then start one worker
process (pool P with C workers, prefetch multiplier M) and watch Redis until every task is
acknowledged. Prints one JSON line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python celery_drain.py N C [P [M]]``
(P ``prefork`` or ``threads``, M 4 by default); ``PEER_REDIS_URL`` names the Redis database
(only its ``aq_bench:`` keys, or ``PEER_KEY_PREFIX``, are touched), ``PEER_DEADLINE``
(seconds) stops the worker if it has not finished by then.

Celery keeps no completion times, so this process looks every 5 ms: the clocks run from the
worker's process start (wall clock, taken just before it is started) to the first look that
finds the queue empty and nothing unacknowledged, and from the first look that finds the queue
shorter (the first claim). ``PEER_ANALYZE`` means nothing here (Redis has no planner).
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
from machine import busy_secs  # noqa: E402


def clean(r: redis.Redis) -> None:
    """Delete every key of this driver."""
    keys = list(r.scan_iter(match=KEY_PREFIX + "*", count=1000))
    if keys:
        r.delete(*keys)


def main(n: int, concurrency: int, pool: str, prefetch: int) -> dict[str, object]:
    """Preload, drain, and report."""
    r = redis.Redis.from_url(BROKER)
    clean(r)
    queue_key, unacked_key = KEY_PREFIX + QUEUE, KEY_PREFIX + "unacked"
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async(producer=producer)
    enqueue_secs = time.perf_counter() - t0
    if r.llen(queue_key) != n:
        raise SystemExit(f"expected {n} messages in {queue_key}, found {r.llen(queue_key)}")
    deadline = float(os.environ.get("PEER_DEADLINE", "600"))
    busy = busy_secs()
    spawned = time.time()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", pool,
         "-c", str(concurrency), "--prefetch-multiplier", str(prefetch), "-l", "WARNING",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=HERE,
    )  # fmt: skip
    first = last = None
    left = n
    timed_out = False
    try:
        while True:
            waiting, unacked = r.llen(queue_key), r.hlen(unacked_key)
            now = time.time()
            left = waiting + unacked
            if first is None and waiting < n:
                first = now
            if left == 0:
                last = now
                break
            if worker.poll() is not None:
                break
            if now - spawned > deadline:
                timed_out = True
                break
            time.sleep(0.005)
    finally:
        busy = busy_secs() - busy  # up to the last acknowledgement seen (or the failure)
        worker.terminate()
        worker.wait()
        clean(r)
    return {
        "system": "celery",
        "n": n,
        "knobs": {"pool": pool, "concurrency": concurrency, "prefetch_multiplier": prefetch},
        "enqueue_per_s": n / enqueue_secs,
        "statistics": None,
        "done": n - left,
        "spawned_at": spawned,
        "first_claim_at": first,
        "last_done_at": last,
        "worker_exit": worker.returncode,
        "timed_out": timed_out,
        "machine_cpu_secs": busy,
    }


if __name__ == "__main__":
    argv = sys.argv[1:]
    pool = argv[2] if len(argv) > 2 else "prefork"
    prefetch = int(argv[3]) if len(argv) > 3 else 4
    print(json.dumps(main(int(argv[0]), int(argv[1]), pool, prefetch)))
