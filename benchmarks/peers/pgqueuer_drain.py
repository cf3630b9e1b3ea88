"""Drain driver for pgqueuer 1.6.0: preload N no-op jobs, then start one worker process (a
QueueManager with concurrency C and batch B, in drain mode) and wait for it. Prints one JSON
line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python pgqueuer_drain.py N C B``;
``PEER_DSN`` names the database (its pgqueuer tables are emptied), ``PEER_ANALYZE=1`` gathers
planner statistics after the preload, ``PEER_DEADLINE`` (seconds) stops the worker if it has
not finished by then.

The clocks come from the database: the worker's process start (wall clock, taken here just
before it is started), the first pick and the last successful completion that pgqueuer logged
(``pgqueuer_log.created``, stamped by the server as each batch is written), and how many jobs
completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

import asyncpg
from machine import busy_secs
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

DSN = os.environ.get("PEER_DSN", "postgresql://postgres@127.0.0.1:5432/aq_bench_pgqueuer")

SCRIPT = os.path.abspath(__file__)


async def work(concurrency: int, batch: int) -> None:
    """The worker process: drain the queue, then exit."""
    conn = await asyncpg.connect(DSN)
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop", concurrency_limit=concurrency)
    async def noop(job: object) -> None:
        if os.environ.get("PEER_FAIL") == "1":
            raise RuntimeError("this handler fails (a test of the bench)")
        return None

    await manager.run(
        mode=QueueExecutionMode.drain, batch_size=batch, max_concurrent_tasks=concurrency
    )
    await conn.close()


async def statistics(conn: asyncpg.Connection, table: str) -> dict[str, object]:
    """What the planner knows about ``table``."""
    row = await conn.fetchrow(
        "SELECT c.reltuples, s.last_analyze FROM pg_class c "
        "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = $1",
        table,
    )
    return {
        "table": table,
        "reltuples": float(row["reltuples"]) if row else None,
        "last_analyze": None
        if row is None or row["last_analyze"] is None
        else str(row["last_analyze"]),
    }


async def main(n: int, concurrency: int, batch: int) -> dict[str, object]:
    """Preload, drain in a worker process, and report."""
    conn = await asyncpg.connect(DSN)
    queries = Queries(AsyncpgDriver(conn))
    with contextlib.suppress(Exception):  # already installed
        await queries.install()
    await conn.execute("TRUNCATE pgqueuer; TRUNCATE pgqueuer_log")
    t0 = time.perf_counter()
    await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
    enqueue_secs = time.perf_counter() - t0
    if os.environ.get("PEER_ANALYZE") == "1":  # the default pass: as autovacuum would
        await conn.execute("ANALYZE pgqueuer; ANALYZE pgqueuer_log")
    stats = await statistics(conn, "pgqueuer")
    deadline = float(os.environ.get("PEER_DEADLINE", "600"))
    busy = busy_secs()
    spawned = time.time()
    worker = await asyncio.create_subprocess_exec(
        sys.executable, SCRIPT, "work", str(concurrency), str(batch)
    )
    timed_out = False
    try:
        await asyncio.wait_for(worker.wait(), deadline)
    except TimeoutError:
        timed_out = True
        worker.kill()
        await worker.wait()
    busy = busy_secs() - busy  # the worker drained and exited (drain mode)
    row = await conn.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'successful') AS done, "
        "extract(epoch FROM min(created) FILTER (WHERE status = 'picked')) AS first, "
        "extract(epoch FROM max(created) FILTER (WHERE status = 'successful')) AS last "
        "FROM pgqueuer_log"
    )
    await conn.close()
    return {
        "system": "pgqueuer",
        "n": n,
        "knobs": {"concurrency": concurrency, "batch": batch},
        "enqueue_per_s": n / enqueue_secs,
        "statistics": stats,
        "done": int(row["done"]),
        "spawned_at": spawned,
        "first_claim_at": None if row["first"] is None else float(row["first"]),
        "last_done_at": None if row["last"] is None else float(row["last"]),
        "worker_exit": worker.returncode,
        "timed_out": timed_out,
        "machine_cpu_secs": busy,
    }


if __name__ == "__main__":
    if sys.argv[1] == "work":
        asyncio.run(work(int(sys.argv[2]), int(sys.argv[3])))
    else:
        args = [int(a) for a in sys.argv[1:]]
        print(json.dumps(asyncio.run(main(args[0], args[1], args[2] if len(args) > 2 else 10))))
