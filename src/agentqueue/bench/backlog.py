"""Backlog: claim latency with 1,000, 100,000 and 1,000,000 tasks queued on PostgreSQL.

Each size has a database of its own (``<database>_backlog_<size>``): loaded (submit_many in
chunks, then admitted until none is pending), vacuumed and analyzed (the steady state autovacuum
keeps), and when all are loaded, a CHECKPOINT, so that no size's claims meet the writing of
the loads' pages. Then ``claim(10)`` is timed in rounds: in each round every size takes its
share of the calls in turn, the order turned by one from round to round. Each claimed batch is
completed and as many new tasks are submitted in its place (untimed), so every queue stays at
its size. A size's figure is the median of all its timed claims; the target is the ratio of the
largest size's to the smallest's, and each round's ratio is kept beside it.

Why rounds: a claim's time is mostly its round trip and its commit's flush, which move with the
machine from one minute to the next. Timed one size after the other, minutes apart, each size's
median moved between 1.9 and 5.2 ms from run to run whatever its size, and the ratio with it
(0.61x to 2.13x). Taken in turns, a slow spell falls on every size alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..service.execution import Outcome, OutcomeKind
from ..store.admin import checkpoint, dbname, drop_database, execute, with_dbname
from .common import BenchContext, Row, fmt_ms, percentile, ratio, rotated, target_row
from .db import count, fresh_postgres, preload, specs
from .names import NOOP

NAME = "backlog"
SYSTEM = "agentqueue (PostgreSQL)"
WARMUP_CLAIMS = 5
ADMIT_LIMIT = 10_000
WORKER = "bench-backlog"


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(ctx.sizes.backlog) + ctx.sizes.backlog_rounds


def size_url(ctx: BenchContext, size: int) -> str:
    """The database of one backlog size, named after the run's."""
    return with_dbname(ctx.pg_url, f"{dbname(ctx.pg_url)}_backlog_{size}")


async def load(ctx: BenchContext, url: str, size: int) -> float:
    """A new database at ``url`` with ``size`` tasks queued, vacuumed and analyzed; the seconds
    it took."""
    started = time.perf_counter()
    await fresh_postgres(url)
    queue = AsyncQueue(url, actor="bench")
    try:
        bar = ctx.progress.inner(2 * size, f"backlog: load {size:,} tasks")
        await preload(queue, size, NOOP, bar)
        while True:
            admitted = await queue.admit(ADMIT_LIMIT)
            bar.update(len(admitted))
            if not admitted:
                break
        bar.close()
    finally:
        await queue.close()
    await execute(url, "VACUUM (ANALYZE) aq_tasks")
    return time.perf_counter() - started


async def time_claims(queue: AsyncQueue, calls: int, n: int) -> list[float]:
    """Milliseconds of each of ``calls`` claim(n) calls. Every claimed task is completed and
    replaced by a new one (untimed), so the queue stays at its size."""
    out: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        tasks = await queue.claim(n, WORKER)
        out.append((time.perf_counter() - started) * 1000)
        if len(tasks) < n:
            raise RuntimeError(f"claim({n}) returned {len(tasks)} tasks: the backlog ran dry")
        await queue.finish(
            [
                Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t)
                for t in tasks
                if t.lock_token is not None
            ]
        )
        await queue.submit_many(specs(len(tasks), NOOP))
        await queue.admit(len(tasks))  # none waits unless a limit holds submits back
    return out


def shares(total: int, rounds: int) -> list[int]:
    """``total`` calls split between ``rounds`` as evenly as they go (the first get one more)."""
    base, extra = divmod(total, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Claim latency at each backlog size, the sizes taking turns in rounds."""
    sizes = sorted(ctx.sizes.backlog)
    calls, n, rounds = ctx.sizes.backlog_claims, ctx.sizes.claim_size, ctx.sizes.backlog_rounds
    urls = {size: size_url(ctx, size) for size in sizes}
    queues: dict[int, AsyncQueue] = {}
    loaded: dict[int, float] = {}
    times: dict[int, list[list[float]]] = {size: [] for size in sizes}
    try:
        for size in sizes:
            ctx.progress.step(f"backlog: {size:,} queued")
            loaded[size] = await load(ctx, urls[size], size)
            ctx.progress.done()
        checkpointed = await checkpoint(urls[sizes[-1]])  # the whole server's pages
        queued: dict[int, int] = {}
        for size in sizes:
            queues[size] = AsyncQueue(urls[size], actor="bench")
            queued[size] = await count(queues[size], TaskState.QUEUED)
            await time_claims(queues[size], WARMUP_CLAIMS, n)
        for r, share in enumerate(shares(calls, rounds)):
            ctx.progress.step(f"backlog: round {r + 1} of {rounds}")
            for size in rotated(sizes, r):
                times[size].append(await time_claims(queues[size], share, n))
            ctx.progress.done()
        after = {size: await count(queues[size], TaskState.QUEUED) for size in sizes}
    finally:
        for queue in queues.values():
            await queue.close()
        for url in urls.values():  # leave no million rows behind
            await drop_database(url)
    results: dict[str, Any] = {}
    for size in sizes:
        every = [ms for block in times[size] for ms in block]
        results[str(size)] = {
            "queued": queued[size],
            "queued_after": after[size],
            "load_secs": loaded[size],
            "claims": len(every),
            "claim_size": n,
            "median_ms": statistics.median(every),
            "p90_ms": percentile(every, 90),
            "min_ms": min(every),
            "max_ms": max(every),
            "round_medians_ms": [statistics.median(block) for block in times[size]],
        }
    small, large = sizes[0], sizes[-1]
    round_ratios = [
        ratio(statistics.median(big), statistics.median(little))
        for big, little in zip(times[large], times[small], strict=True)
    ]
    spread = [r for r in round_ratios if r is not None]
    return {
        "sizes": results,
        "ratio_largest_to_smallest": ratio(
            results[str(large)]["median_ms"], results[str(small)]["median_ms"]
        ),
        "round_ratios": round_ratios,
        "rounds": rounds,
        "checkpointed": checkpointed,
        "largest": large,
        "smallest": small,
        "notes": [
            f"Median of {calls} claim({n}) calls per size, taken in {rounds} rounds in which "
            f"the sizes take turns (the order turned each round), after {WARMUP_CLAIMS} "
            "warm-up calls each; each claimed batch is completed and as many new tasks "
            "submitted in its place (untimed), so each queue stays at its size. One database "
            "per size, vacuumed and analyzed after loading"
            + (", then a checkpoint." if checkpointed else "; no checkpoint (not permitted).")
            + (
                f" The {large:,} / {small:,} ratio of each round: "
                f"{min(spread):.2f}x to {max(spread):.2f}x."
                if spread
                else ""
            )
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
