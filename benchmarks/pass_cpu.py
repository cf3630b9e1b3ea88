"""Pass CPU A/B: the CPU one process spends per task on one hot pass of the store and service
code, with no worker around it, for two or more source trees in alternation (A, B, A, B, ...)
in one sitting.

Passes (``--what``):

- ``routed``: the scheduler's admission through the planner, as a worker's scheduler runs it
  with the routed benchmark's six command agents configured (``agentqueue.bench.routed``):
  N pending no-op tasks on a fresh PostgreSQL database, admitted 1,000 at a time (each pass:
  the lock, the load and tenants, the candidates, the plan, the admissions by id, the COMMIT)
  until none is left. The first pass is left out (it warms the prepared statements).
- ``sqlite-claim``: claims from a SQLite file of N queued no-op tasks, 250 at a time, until
  none is left (the store's claim and its rows decoded into tasks), through the queue's API.

Each run is a fresh child process with the variant's tree first on PYTHONPATH, which prepares
its own database (so each variant gets its own schema and code) and then reports the process's
user and system CPU for the measured part (both threads on SQLite) divided by the tasks it
moved. The database's own CPU on PostgreSQL is not counted (see ``drain_ab.py`` for it)::

    git archive REV src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/pass_cpu.py --what routed --variant A=/tmp/base/src --variant B=src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import parse_variants

HERE = Path(__file__).resolve()
WHAT = ("routed", "sqlite-claim")


async def _routed(url: str, n: int) -> tuple[int, float]:
    """Admit N routed pending tasks 1,000 at a time; tasks admitted after the first pass, and
    the CPU seconds they took."""
    from agentqueue.bench.common import NOOP
    from agentqueue.bench.db import preload
    from agentqueue.bench.routed import ROUTED
    from agentqueue.config import Settings
    from agentqueue.queue import AsyncQueue
    from agentqueue.scheduler.steps import admit
    from agentqueue.store.admin import drop_database, ensure_database, execute

    await drop_database(url)
    await ensure_database(url)
    queue = AsyncQueue(url, actor="bench", settings=Settings(**ROUTED))
    try:
        await queue.open()
        await preload(queue, n, NOOP)
        await execute(url, "ANALYZE")
        rt = await queue.runtime()
        await admit(rt, 1000)  # the first pass warms the statements: not counted
        start = time.process_time()
        done = 0
        while moved := len(await admit(rt, 1000)):
            done += moved
        return done, time.process_time() - start
    finally:
        await queue.close()


async def _sqlite_claim(path: str, n: int) -> tuple[int, float]:
    """Claim N queued tasks from a fresh SQLite file 250 at a time; how many, and the CPU."""
    from agentqueue.bench.common import NOOP
    from agentqueue.bench.db import preload
    from agentqueue.queue import AsyncQueue

    queue = AsyncQueue(f"sqlite:///{path}", actor="bench")
    try:
        await queue.open()
        await preload(queue, n, NOOP)
        start = time.process_time()
        done = 0
        while claimed := await queue.claim(250, "pass-cpu"):
            done += len(claimed)
        return done, time.process_time() - start
    finally:
        await queue.close()


def _child(what: str, pg: str, n: int) -> None:
    if what == "routed":
        done, cpu = asyncio.run(_routed(pg, n))
    else:
        with tempfile.TemporaryDirectory(prefix="aq-pass-cpu-") as tmp:
            done, cpu = asyncio.run(_sqlite_claim(str(Path(tmp) / "claims.db"), n))
    print(json.dumps({"done": done, "us": cpu / done * 1e6 if done else None}))


def run_one(what: str, src: str, pg: str, n: int) -> dict[str, Any]:
    """One measurement in a child process on the tree ``src``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(src).resolve())
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("AGENTQUEUE_CONFIG", None)
    cmd = [sys.executable, str(HERE), "--child", what, "--pg", pg, "--n", str(n)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=WHAT, default="routed")
    parser.add_argument("--variant", action="append", default=[], help="LABEL=SRC")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_pass_cpu")
    parser.add_argument("--child", choices=WHAT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.pg, args.n)
        return
    variants = [(v.label, v.src) for v in parse_variants(parser, args.variant)]
    print(f"{args.what}: N={args.n:,}, {args.rounds} rounds")
    results: dict[str, list[float]] = {label: [] for label, _ in variants}
    for r in range(args.rounds):
        for label, src in variants:
            res = run_one(args.what, src, args.pg, args.n)
            load = os.getloadavg()[0]
            print(f"round {r + 1} {label}: {res['us']:.1f} us CPU per task "
                  f"({res['done']:,} tasks), load {load:.2f}", flush=True)  # fmt: skip
            results[label].append(float(res["us"]))
    medians = {label: statistics.median(runs) for label, runs in results.items()}
    for label, median in medians.items():
        print(f"{label}: median {median:.1f} us CPU per task over {len(results[label])} runs")
    first = variants[0][0]
    for label, _ in variants[1:]:
        print(f"{label}/{first}: {medians[label] / medians[first]:.2f}x the CPU per task")


if __name__ == "__main__":
    main()
