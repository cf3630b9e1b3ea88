"""The Celery app of the Celery drain driver: one no-op task, acks_late (a task survives a
worker crash, as a durable agent queue must), results ignored.

Every Redis key it uses starts with ``aq_bench:`` (or ``PEER_KEY_PREFIX``) so the driver can
clean up after itself without touching anything else in the Redis database.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/0")
KEY_PREFIX = os.environ.get("PEER_KEY_PREFIX", "aq_bench:")
QUEUE = "celery"

app = Celery("aq_bench_peer", broker=BROKER, backend=None)
app.conf.task_ignore_result = True
app.conf.worker_prefetch_multiplier = 4
app.conf.task_acks_late = True
app.conf.broker_transport_options = {"global_keyprefix": KEY_PREFIX}


@app.task(name="noop")
def noop() -> None:
    """Nothing."""
    return None
