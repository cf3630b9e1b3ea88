"""Scaling: 1, 2 and 4 worker processes on one PostgreSQL queue drain the same number of tasks.

Each task's handler is ``await asyncio.sleep(0.02)``: an agent step that waits on I/O (a model
or tool call), so a worker's throughput is bounded by its slots (concurrency 16: at most 800
tasks/s per worker) and by the CPU the queue itself uses. The tasks are preloaded; the workers
start, open their connections, say ready, and all start on one signal; the time runs from that
signal to the last task's ``finished_at`` in the database.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..store.admin import scalar
from .common import BenchContext, Row, fmt_rate, rate, ratio, target_row
from .db import analyze, fresh_url, preload, wait_for_count
from .names import IO_STEP
from .procs import Child

NAME = "scaling"
SYSTEM = "agentqueue (PostgreSQL)"


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(ctx.sizes.scaling_workers)


async def measure(ctx: BenchContext, workers: int) -> dict[str, Any]:
    """Drain ``scaling_n`` I/O-step tasks with ``workers`` worker processes."""
    sizes = ctx.sizes
    n = sizes.scaling_n
    url = await fresh_url(ctx, "postgresql", "scaling")
    queue = AsyncQueue(url, actor="bench")
    children: list[Child] = []
    try:
        await preload(queue, n, IO_STEP)
        await analyze(url)
        args = {
            "url": url,
            "concurrency": sizes.scaling_concurrency,
            "task_type": IO_STEP,
            "sleep_secs": sizes.scaling_sleep_secs,
            "wait_go": True,
        }
        for i in range(workers):
            children.append(await Child.start("serve", args, ctx.work_dir, f"scaling-{i}"))
        for child in children:
            await child.message("ready", within=60)
        go = time.time()
        for child in children:
            child.send("go")
        await wait_for_count(queue, TaskState.COMPLETED, n, within=max(120.0, n / 50))
        last = float(await scalar(url, "SELECT extract(epoch FROM max(finished_at)) FROM aq_tasks"))
        stats = [await child.stop() for child in children]
    finally:
        for child in children:
            await child.kill()
        await queue.close()
    elapsed = last - go
    return {
        "workers": workers,
        "n": n,
        "elapsed_secs": elapsed,
        "per_s": rate(n, elapsed),
        "completed_by_worker": [s.get("stats", {}).get("completed") for s in stats],
    }


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Throughput with each number of workers, and the ratios to one worker."""
    sizes = ctx.sizes
    runs: dict[str, Any] = {}
    for workers in sizes.scaling_workers:
        ctx.progress.step(f"scaling: {workers} worker(s)")
        runs[str(workers)] = await measure(ctx, workers)
        await asyncio.sleep(0.5)
        ctx.progress.done()
    one = runs.get("1", {}).get("per_s")
    ceiling = sizes.scaling_concurrency / sizes.scaling_sleep_secs
    return {
        "runs": runs,
        "ratio_2_to_1": ratio(runs.get("2", {}).get("per_s"), one),
        "ratio_4_to_1": ratio(runs.get("4", {}).get("per_s"), one),
        "workload": {
            "handler": f"await asyncio.sleep({sizes.scaling_sleep_secs:g})",
            "concurrency_per_worker": sizes.scaling_concurrency,
            "slot_ceiling_per_worker_per_s": ceiling,
            "n": sizes.scaling_n,
        },
        "notes": [
            f"Scaling workload: {sizes.scaling_n:,} tasks whose handler awaits "
            f"asyncio.sleep({sizes.scaling_sleep_secs:g}) (an agent step waiting on I/O); each "
            f"worker process has concurrency {sizes.scaling_concurrency}, so one worker can do at "
            f"most {ceiling:,.0f} tasks/s; the time runs from a common start signal to the last "
            "finished_at."
        ],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """Throughput per worker count, then the 4/1 target and the 2/1 ratio."""
    out = [
        Row(NAME, SYSTEM, f"{w} worker(s): {fmt_rate(data['per_s'])}", data["per_s"])
        for w, data in result.get("runs", {}).items()
    ]
    two = result.get("ratio_2_to_1")
    out.append(Row(NAME, SYSTEM, f"2 / 1 workers: {two:.2f}x" if two else "2 / 1 workers", two))
    out.append(
        target_row(NAME, SYSTEM, "4 / 1 workers", result.get("ratio_4_to_1"), ">=", 1.7, "x")
    )
    return out
