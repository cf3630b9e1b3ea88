"""Drain driver for pgqueuer 1.6.0: preload N no-op jobs, then one QueueManager (in this
process) drains them with concurrency C and batch B. Prints one JSON line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python pgqueuer_drain.py N C B``;
``PEER_DSN`` names the database (its pgqueuer tables are emptied).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

DSN = os.environ.get("PEER_DSN", "postgresql://postgres@127.0.0.1:5432/aq_bench_pgqueuer")


async def main(n: int, concurrency: int, batch: int) -> dict[str, object]:
    """Preload, drain, and report."""
    conn = await asyncpg.connect(DSN)
    queries = Queries(AsyncpgDriver(conn))
    with contextlib.suppress(Exception):  # already installed
        await queries.install()
    await conn.execute("TRUNCATE pgqueuer; TRUNCATE pgqueuer_log")
    t0 = time.perf_counter()
    await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
    t1 = time.perf_counter()
    if os.environ.get("PEER_ANALYZE") == "1":  # the statistics pass
        await conn.execute("ANALYZE pgqueuer")
    manager = QueueManager(queries)

    @manager.entrypoint("noop", concurrency_limit=concurrency)
    async def noop(job: object) -> None:
        return None

    t2 = time.perf_counter()
    await manager.run(
        mode=QueueExecutionMode.drain, batch_size=batch, max_concurrent_tasks=concurrency
    )
    t3 = time.perf_counter()
    left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    await conn.close()
    return {
        "system": "pgqueuer",
        "n": n,
        "concurrency": concurrency,
        "batch": batch,
        "enqueue_per_s": n / (t1 - t0),
        "drain_per_s": (n - left) / (t3 - t2),
        "drain_secs": t3 - t2,
        "left": left,
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(asyncio.run(main(args[0], args[1], args[2] if len(args) > 2 else 10))))
