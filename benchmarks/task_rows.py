"""Task rows: what reading tasks back costs per row on PostgreSQL (the statement and decoding
every column into a Task, the path a claim's rows take), for two or more source trees in
alternation in one sitting, like ``drain_ab.py``.

Preloads 500 no-op tasks once, then for each variant, in turn, runs a child process with that
tree first on PYTHONPATH, which reads the 500 back through the store (``get_tasks``: every
column, as the claim returns them) 200 times and reports the median per row. The trees must
ship the same migrations (the database is prepared once, by the first)::

    .venv/bin/python benchmarks/task_rows.py --rounds 5 \\
        --variant A=/tmp/base/src --variant B=src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import parse_variants

HERE = Path(__file__).resolve()
ROWS = 500
READS = 200


async def _prepare(url: str) -> None:
    from agentqueue.bench.common import NOOP
    from agentqueue.queue import AsyncQueue
    from agentqueue.store.admin import drop_database, ensure_database, execute

    await drop_database(url)
    await ensure_database(url)
    queue = AsyncQueue(url, actor="bench")
    try:
        await queue.open()
        await queue.submit_many([{"title": "bench", "task_type": NOOP} for _ in range(ROWS)])
    finally:
        await queue.close()
    await execute(url, "ANALYZE")


async def _measure(url: str) -> float:
    """Median microseconds per row of reading every task back."""
    from agentqueue.store import make_store
    from agentqueue.store.admin import scalar

    ids_text = await scalar(url, "SELECT string_agg(id::text, ',') FROM aq_tasks")
    ids = [UUID(x) for x in str(ids_text).split(",")]
    store = make_store(url)
    await store.open()
    try:
        for _ in range(20):  # warm: prepared statements, caches
            await store.get_tasks(ids)
        times = []
        for _ in range(READS):
            started = time.perf_counter()
            tasks = await store.get_tasks(ids)
            times.append(time.perf_counter() - started)
        assert len(tasks) == ROWS
    finally:
        await store.close()
    return statistics.median(times) / ROWS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[], help="LABEL=SRC")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_task_rows")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        asyncio.run(_prepare(args.pg))
        return
    if args.child:
        print(json.dumps({"us_per_row": asyncio.run(_measure(args.pg))}))
        return
    variants = [(v.label, v.src) for v in parse_variants(parser, args.variant)]
    env = {**os.environ, "PYTHONPATH": variants[0][1]}  # each SRC resolved by parse_variants
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, str(HERE), "--prepare", "--pg", args.pg], env=env, check=True)
    print(f"{ROWS} task rows read back {READS} times a run, {args.rounds} rounds, {args.pg}")
    results: dict[str, list[float]] = {label: [] for label, _ in variants}
    for r in range(args.rounds):
        for label, src in variants:
            env["PYTHONPATH"] = src
            out = subprocess.run(
                [sys.executable, str(HERE), "--child", "x", "--pg", args.pg],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            us = float(json.loads(out.stdout.strip().splitlines()[-1])["us_per_row"])
            results[label].append(us)
            print(f"round {r + 1} {label}: {us:.2f} us/row, load {os.getloadavg()[0]:.2f}")
    medians = {label: statistics.median(v) for label, v in results.items()}
    for label, m in medians.items():
        print(f"{label}: median {m:.2f} us/row")
    first = variants[0][0]
    for label in list(medians)[1:]:
        print(f"{label}/{first}: {medians[label] / medians[first]:.2f}x the cost per row")


if __name__ == "__main__":
    main()
