"""Backlog: claim latency with 1,000, 100,000 and 1,000,000 tasks queued on PostgreSQL.

The queue is topped up to each size in turn (submit_many in batches, then admitted until none is
pending), vacuumed and analyzed (the steady state autovacuum keeps), then ``claim(10)`` is timed
over a series of calls; each claimed batch is completed (untimed), so the queue stays at the same
size. The figure is the median claim latency per size; the target is the ratio of the largest
size to the smallest.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..service.execution import Outcome, OutcomeKind
from ..store.admin import execute
from .common import BenchContext, Row, fmt_ms, percentile, ratio, target_row
from .db import count, fresh_url, preload
from .names import NOOP

NAME = "backlog"
SYSTEM = "agentqueue (PostgreSQL)"
WARMUP_CLAIMS = 5
ADMIT_LIMIT = 10_000
WORKER = "bench-backlog"


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(ctx.sizes.backlog)


async def top_up(ctx: BenchContext, queue: AsyncQueue, size: int) -> float:
    """Bring the queued count up to ``size``; return the seconds it took."""
    started = time.perf_counter()
    need = size - await count(queue, TaskState.QUEUED)
    if need > 0:
        bar = ctx.progress.inner(2 * need, f"backlog: load {need:,} tasks")
        await preload(queue, need, NOOP, bar)
        while True:
            admitted = await queue.admit(ADMIT_LIMIT)
            bar.update(len(admitted))
            if not admitted:
                break
        bar.close()
    await execute(ctx.pg_url, "VACUUM (ANALYZE) aq_tasks")
    return time.perf_counter() - started


async def time_claims(queue: AsyncQueue, calls: int, n: int) -> list[float]:
    """Milliseconds of each of ``calls`` claim(n) calls; every claimed task is completed."""
    out: list[float] = []
    for i in range(WARMUP_CLAIMS + calls):
        started = time.perf_counter()
        tasks = await queue.claim(n, WORKER)
        elapsed = (time.perf_counter() - started) * 1000
        if len(tasks) < n:
            raise RuntimeError(f"claim({n}) returned {len(tasks)} tasks: the backlog ran dry")
        if i >= WARMUP_CLAIMS:
            out.append(elapsed)
        await queue.finish(
            [
                Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t)
                for t in tasks
                if t.lock_token is not None
            ]
        )
    return out


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Claim latency at each backlog size, smallest first (the queue only grows)."""
    sizes = sorted(ctx.sizes.backlog)
    calls, n = ctx.sizes.backlog_claims, ctx.sizes.claim_size
    await fresh_url(ctx, "postgresql", "backlog")
    queue = AsyncQueue(ctx.pg_url, actor="bench")
    results: dict[str, Any] = {}
    try:
        for size in sizes:
            ctx.progress.step(f"backlog: {size:,} queued")
            load_secs = await top_up(ctx, queue, size)
            queued = await count(queue, TaskState.QUEUED)
            times = await time_claims(queue, calls, n)
            results[str(size)] = {
                "queued": queued,
                "load_secs": load_secs,
                "claims": len(times),
                "claim_size": n,
                "median_ms": statistics.median(times),
                "p90_ms": percentile(times, 90),
                "min_ms": min(times),
                "max_ms": max(times),
            }
            ctx.progress.done()
    finally:
        await queue.close()
    await fresh_url(ctx, "postgresql", "backlog")  # leave no million rows behind
    small, large = str(sizes[0]), str(sizes[-1])
    return {
        "sizes": results,
        "ratio_largest_to_smallest": ratio(
            results[large]["median_ms"], results[small]["median_ms"]
        ),
        "largest": sizes[-1],
        "smallest": sizes[0],
        "notes": [
            f"Median of {calls} claim({n}) calls per size (after {WARMUP_CLAIMS} warm-up calls), "
            "each batch completed untimed; the queue is vacuumed and analyzed after loading."
        ],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """One row per size, then the ratio target (1M / 1k; a smoke run has a smaller top)."""
    out = [
        Row(
            NAME,
            SYSTEM,
            f"claim(10) median with {int(size):,} queued: {fmt_ms(data['median_ms'])}",
            data["median_ms"],
        )
        for size, data in result.get("sizes", {}).items()
    ]
    largest, smallest = result.get("largest", 0), result.get("smallest", 0)
    name = f"claim latency {largest:,} / {smallest:,}"
    value = result.get("ratio_largest_to_smallest")
    if largest >= 1_000_000:
        out.append(target_row(NAME, SYSTEM, name, value, "<=", 1.5, "x"))
    else:
        out.append(
            Row(NAME, SYSTEM, f"{name}: {value:.2f}x (target is for 1,000,000)" if value else name)
        )
    return out
