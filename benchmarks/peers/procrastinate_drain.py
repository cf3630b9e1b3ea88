"""Drain driver for procrastinate 3.10.0: preload N no-op jobs, then start one worker process
(concurrency C, exiting once no job is left) and wait for it. Prints one JSON line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python procrastinate_drain.py N C``;
``PEER_DSN`` names the database (its schema is installed on first use, its jobs emptied),
``PEER_ANALYZE=1`` gathers planner statistics after the preload, ``PEER_DEADLINE`` (seconds)
stops the worker if it has not finished by then.

The clocks come from the database: the worker's process start (wall clock, taken here just
before it is started), the first ``started`` and the last ``succeeded`` event procrastinate
recorded (``procrastinate_events.at``, stamped by the server), and how many jobs succeeded.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from machine import busy_secs
from procrastinate import App, PsycopgConnector

DSN = os.environ.get("PEER_DSN", "postgresql://postgres@127.0.0.1:5432/aq_bench_procrastinate")
app = App(connector=PsycopgConnector(conninfo=DSN))


@app.task(name="noop")
async def noop() -> None:
    """Nothing (or a failure, when the bench tests itself)."""
    if os.environ.get("PEER_FAIL") == "1":
        raise RuntimeError("this handler fails (a test of the bench)")
    return None


SCRIPT = os.path.abspath(__file__)


async def work(concurrency: int) -> None:
    """The worker process: run jobs until none is left, then exit."""
    async with app.open_async():
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False, delete_jobs="never"
        )


async def fetch(sql: str) -> Any:
    """The first row of a query."""
    async with app.connector.pool.connection() as conn:
        cur = await conn.execute(sql)
        return await cur.fetchone()


async def main(n: int, concurrency: int) -> dict[str, object]:
    """Preload, drain in a worker process, and report."""
    async with app.open_async():
        row = await fetch("SELECT to_regclass('procrastinate_jobs')")
        if row is None or row[0] is None:
            await app.schema_manager.apply_schema_async()
        async with app.connector.pool.connection() as conn:
            await conn.execute("TRUNCATE procrastinate_jobs CASCADE")
        t0 = time.perf_counter()
        await noop.batch_defer_async(*[{} for _ in range(n)])
        enqueue_secs = time.perf_counter() - t0
        if os.environ.get("PEER_ANALYZE") == "1":  # the default pass: as autovacuum would
            async with app.connector.pool.connection() as conn:
                await conn.execute("ANALYZE procrastinate_jobs")
                await conn.execute("ANALYZE procrastinate_events")
        stats = await fetch(
            "SELECT c.reltuples, s.last_analyze FROM pg_class c LEFT JOIN pg_stat_user_tables s "
            "ON s.relid = c.oid WHERE c.relname = 'procrastinate_jobs'"
        )
        deadline = float(os.environ.get("PEER_DEADLINE", "600"))
        busy = busy_secs()
        spawned = time.time()
        worker = await asyncio.create_subprocess_exec(
            sys.executable, SCRIPT, "work", str(concurrency)
        )
        timed_out = False
        try:
            await asyncio.wait_for(worker.wait(), deadline)
        except TimeoutError:
            timed_out = True
            worker.kill()
            await worker.wait()
        busy = busy_secs() - busy  # the worker drained and exited (wait=False)
        done = await fetch("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        clock = await fetch(
            "SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started')), "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) "
            "FROM procrastinate_events"
        )
    return {
        "system": "procrastinate",
        "n": n,
        "knobs": {"concurrency": concurrency},
        "enqueue_per_s": n / enqueue_secs,
        "statistics": {
            "table": "procrastinate_jobs",
            "reltuples": None if stats is None else float(stats[0]),
            "last_analyze": None if stats is None or stats[1] is None else str(stats[1]),
        },
        "done": int(done[0]) if done else 0,
        "spawned_at": spawned,
        "first_claim_at": None if clock is None or clock[0] is None else float(clock[0]),
        "last_done_at": None if clock is None or clock[1] is None else float(clock[1]),
        "worker_exit": worker.returncode,
        "timed_out": timed_out,
        "machine_cpu_secs": busy,
    }


if __name__ == "__main__":
    if sys.argv[1] == "work":
        asyncio.run(work(int(sys.argv[2])))
    else:
        print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))))
