"""The cost of a keyed audit log: the drain of N no-op tasks with an audit key configured
(``[audit] key_env``: every event's hash an HMAC, every event's ``row_mac`` keyed) against the
same drain without one, on SQLite and PostgreSQL, alternating, in one run. Tables get planner
statistics after each preload. Prints each pair and the median ratio (keyed / plain)::

    .venv/bin/python benchmarks/audit_key.py [--n 20000] [--pairs 3] [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sqlite3
import statistics
import tempfile
from pathlib import Path

import psycopg

from agentqueue.bench.common import BACKENDS, BenchContext, Sizes
from agentqueue.bench.db import analyze as analyze_tables
from agentqueue.bench.drain import drain_preloaded, preload_fresh

KEY_ENV = "AQ_BENCH_AUDIT_KEY"


async def _keyed_events(url: str) -> int:
    """How many events carry a keyed hash (``<key id>:<hex>``): proof the key was used."""
    sql = "SELECT count(*) FROM aq_events WHERE hash LIKE '%:%'"
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return int(db.execute(sql).fetchone()[0])
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute(sql.replace("%", "%%"))).fetchone()
        return int(row[0]) if row else 0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_bench")
    args = parser.parse_args()
    os.environ[KEY_ENV] = secrets.token_hex(32)
    keyed = {"audit": {"key_env": KEY_ENV}}
    with tempfile.TemporaryDirectory() as work:
        ctx = BenchContext(pg_url=args.pg, out_dir=Path(work), work_dir=Path(work), sizes=Sizes())
        for backend in BACKENDS:
            ratios = []
            for pair in range(args.pairs):
                rates = {}
                for label, settings in (("plain", None), ("keyed", keyed)):
                    url, enqueue = await preload_fresh(ctx, backend, args.n, settings)
                    await analyze_tables(url)
                    out = await drain_preloaded(
                        ctx, backend, url, args.n, args.concurrency, enqueue, settings
                    )
                    rates[label] = out["drain_per_s"]
                    keyed_events = await _keyed_events(url)
                    if (keyed_events > 0) != (settings is not None):
                        raise SystemExit(f"{label} drain on {backend}: {keyed_events} keyed events")
                ratio = rates["keyed"] / rates["plain"]
                ratios.append(ratio)
                print(
                    f"{backend} pair {pair + 1}: plain {rates['plain']:,.0f}/s, "
                    f"keyed {rates['keyed']:,.0f}/s, keyed/plain {ratio:.2f}x",
                    flush=True,
                )
            print(f"{backend}: median keyed/plain {statistics.median(ratios):.2f}x", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
