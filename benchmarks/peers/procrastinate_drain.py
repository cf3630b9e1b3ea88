"""Drain driver for procrastinate 3.10.0: preload N no-op jobs, then one worker (in this
process) with concurrency C drains them. Prints one JSON line.

Run with the interpreter of ``.peers/``: ``.peers/bin/python procrastinate_drain.py N C``;
``PEER_DSN`` names the database (its schema is installed on first use, its jobs emptied).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from procrastinate import App, PsycopgConnector

DSN = os.environ.get("PEER_DSN", "postgresql://postgres@127.0.0.1:5432/aq_bench_procrastinate")
app = App(connector=PsycopgConnector(conninfo=DSN))


@app.task(name="noop")
async def noop() -> None:
    """Nothing."""
    return None


async def main(n: int, concurrency: int) -> dict[str, object]:
    """Preload, drain, and report."""
    async with app.open_async():
        async with app.connector.pool.connection() as conn:
            cur = await conn.execute("SELECT to_regclass('procrastinate_jobs')")
            row = await cur.fetchone()
        if row is None or row[0] is None:
            await app.schema_manager.apply_schema_async()
        async with app.connector.pool.connection() as conn:
            await conn.execute("TRUNCATE procrastinate_jobs CASCADE")
        t0 = time.perf_counter()
        await noop.batch_defer_async(*[{} for _ in range(n)])
        t1 = time.perf_counter()
        async with app.connector.pool.connection() as conn:
            if os.environ.get("PEER_ANALYZE") == "1":  # the statistics pass
                await conn.execute("ANALYZE procrastinate_jobs")
        t2 = time.perf_counter()
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False, delete_jobs="never"
        )
        t3 = time.perf_counter()
        async with app.connector.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            )
            row = await cur.fetchone()
    done = int(row[0]) if row else 0
    return {
        "system": "procrastinate",
        "n": n,
        "concurrency": concurrency,
        "enqueue_per_s": n / (t1 - t0),
        "drain_per_s": done / (t3 - t2),
        "drain_secs": t3 - t2,
        "done": done,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))))
