"""Anchor stall: how long the audit anchoring step holds the event loop of the process that runs
it (a worker's scheduler, once a minute) while it catches up on many events.

On each backend: a fresh database, N tasks submitted (one event each; ``--n``, a multiple of
``--step``), then the anchoring step run over them ``--step`` numbers at a time, the ways taken
in turn step by step (A B B A ...): ``one page`` reads and folds each step's numbers at once (as
every step did before pages), ``paged`` in pages of ``--page`` numbers (default: the store's,
5,000). Beside each step a
probe coroutine sleeps 1 ms at a time and notes how late it woke: the longest and the 99th
percentile of those delays are how long the loop was held. A second one submits a task, waits
2 ms, and again, noting how long each submit took: the longest is how long a writer waited for
the step (on SQLite, for its write lock while it held it). Printed per way: the medians over its
steps of the longest delay, the 99th percentile, the longest submit and the step's time::

    .venv/bin/python benchmarks/anchor_stall.py [--n 400000] [--step 100000] [--page 5000]
        [--backend both]

Nothing else runs in the process; the delays are the step's own (and the machine's noise).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue
from agentqueue.bench.common import percentile
from agentqueue.bench.db import preload, reset_postgres
from agentqueue.store.admin import drop_database, ensure_database
from agentqueue.store.base import ANCHOR_PAGE

PROBE_SECS = 0.001


async def _probed(queue: AsyncQueue, step: Any) -> tuple[Any, float, list[float], float]:
    """Run ``step()`` beside the probes; its result, its time, the loop probe's delays and the
    longest submit (s)."""
    delays: list[float] = []
    submits: list[float] = []
    done = asyncio.Event()

    async def writer() -> None:
        while not done.is_set():
            began = time.perf_counter()
            await queue.submit(title="meanwhile", task_type="bench-writer")
            submits.append(time.perf_counter() - began)
            await asyncio.sleep(0.002)

    async def probe() -> None:
        while not done.is_set():
            began = time.perf_counter()
            await asyncio.sleep(PROBE_SECS)
            delays.append(time.perf_counter() - began - PROBE_SECS)

    prober = asyncio.create_task(probe())
    writing = asyncio.create_task(writer())
    await asyncio.sleep(0.01)
    began = time.perf_counter()
    try:
        result = await step()
    finally:
        took = time.perf_counter() - began
        done.set()
        await prober
        await writing
    return result, took, delays, max(submits)


async def run_backend(
    url: str, n: int, step: int, page: int
) -> dict[str, list[tuple[float, float, float, float]]]:
    """Each way's steps on a fresh database at ``url``: (longest delay, p99 delay, longest
    submit, step) in ms."""
    if url.startswith("postgresql"):
        await drop_database(url)
        await ensure_database(url)
        await reset_postgres(url)
    queue = AsyncQueue(url)
    await queue.open()
    ways = {"one page": step, "paged": page}
    order = ["one page", "paged", "paged", "one page"]
    found: dict[str, list[tuple[float, float, float, float]]] = {way: [] for way in ways}
    try:
        await preload(queue, n, "bench")
        for k in range(n // step):
            way = order[k % len(order)]
            anchor, took, delays, submit = await _probed(
                queue, lambda way=way: queue.store.anchor_audit(queue.clock.now(), step, ways[way])
            )
            if anchor is None or anchor.count - (anchor.after or 0) != step:
                raise SystemExit(f"step {k + 1} did not cover {step:,} numbers: {anchor}")
            found[way].append(
                (max(delays) * 1e3, percentile(delays, 99) * 1e3, submit * 1e3, took * 1e3)
            )
    finally:
        await queue.close()
    return found


def _table(
    results: dict[str, dict[str, list[tuple[float, float, float, float]]]], step: int, page: int
) -> str:
    lines = [
        f"| backend | way (page) | steps of {step:,} | longest delay ms | p99 delay ms "
        "| longest submit ms | step ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, ways in results.items():
        for way, rows in ways.items():
            size = step if way == "one page" else page
            med = [statistics.median(r[i] for r in rows) for i in range(4)]
            lines.append(
                f"| {backend} | {way} ({size:,}) | {len(rows)} | {med[0]:.1f} | {med[1]:.1f} "
                f"| {med[2]:.1f} | {med[3]:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400_000)
    parser.add_argument("--step", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=ANCHOR_PAGE)
    parser.add_argument("--backend", choices=("postgresql", "sqlite", "both"), default="both")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_anchor_stall")
    args = parser.parse_args()
    if args.n % args.step or args.n < 2 * args.step:
        parser.error("--n must be a multiple of --step, at least two steps")
    if not 1 <= args.page <= args.step:
        parser.error("--page must be between 1 and --step")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend in ("postgresql", "both"):
            results["postgresql"] = asyncio.run(run_backend(args.pg, args.n, args.step, args.page))
        if args.backend in ("sqlite", "both"):
            url = f"sqlite:///{Path(tmp) / 'anchor_stall.db'}"
            results["sqlite"] = asyncio.run(run_backend(url, args.n, args.step, args.page))
    if args.backend in ("postgresql", "both"):
        asyncio.run(drop_database(args.pg))
    print(
        f"{args.n:,} events, anchored {args.step:,} numbers a step; beside each step a 1 ms "
        "sleep and a submit every 2 ms"
    )
    print(_table(results, args.step, args.page))


if __name__ == "__main__":
    main()
