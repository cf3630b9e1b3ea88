"""Drain: preload N no-op tasks, then one worker process drains them.

agentqueue runs on PostgreSQL and on SQLite: this process preloads with submit_many (then
ANALYZE on PostgreSQL), then starts a worker process (a no-op async handler, concurrency 100),
which times itself from worker start until every task is completed and recorded. The peers do the
same work with their own drivers (``benchmarks/peers/``), run by the ``.peers/`` interpreter.
"""

from __future__ import annotations

from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from .common import (
    BACKENDS,
    NOOP,
    Backend,
    BenchContext,
    Row,
    fmt_rate,
    mib,
    rate,
    ratio,
    target_row,
)
from .db import analyze, count, fresh_url, preload
from .peers import PEERS, run_peer
from .procs import Child, ChildError

NAME = "drain"
LABELS: dict[str, str] = {
    "agentqueue-postgresql": "agentqueue (PostgreSQL)",
    "agentqueue-sqlite": "agentqueue (SQLite)",
    **{p.name: p.label for p in PEERS},
}


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(BACKENDS) + (len(PEERS) if ctx.peers else 0)


async def drain_agentqueue(
    ctx: BenchContext, backend: Backend, n: int, concurrency: int
) -> dict[str, Any]:
    """Preload ``n`` no-op tasks on a fresh database, drain them with one worker process."""
    url = await fresh_url(ctx, backend, "drain")
    queue = AsyncQueue(url, actor="bench")
    try:
        bar = ctx.progress.inner(n, f"preload {n:,} on {backend}")
        enqueue_rate = await preload(queue, n, NOOP, bar)
        bar.close()
    finally:
        await queue.close()
    await analyze(url)
    child = await Child.start(
        "drain", {"url": url, "n": n, "concurrency": concurrency}, ctx.work_dir, f"drain-{backend}"
    )
    result = await child.message("result", within=max(120.0, n / 100))
    await child.wait(30)
    queue = AsyncQueue(url, actor="bench")
    try:
        completed = await count(queue, TaskState.COMPLETED)
    finally:
        await queue.close()
    if completed != n:
        raise ChildError(f"drain on {backend}: {completed} of {n} tasks completed")
    elapsed = float(result["elapsed"])
    cpu = float(result["cpu_secs"])
    return {
        "n": n,
        "store": backend,
        "settings": f"one worker process, concurrency {concurrency}",
        "enqueue_per_s": enqueue_rate,
        "drain_per_s": rate(n, elapsed),
        "drain_secs": elapsed,
        "cpu_secs": cpu,
        "cpu_percent": 100 * cpu / elapsed if elapsed > 0 else None,
        "peak_rss_mib": mib(result.get("peak_rss_bytes")),
    }


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Drain on every system; a peer that fails is recorded with its error."""
    n = ctx.sizes.drain_n
    systems: dict[str, Any] = {}
    errors: list[str] = []
    notes = [
        "Every system: N no-op tasks preloaded, then one worker process drains them; the time "
        "runs from worker start to the last completion. PostgreSQL tables are ANALYZEd after "
        "the preload, for every system.",
    ]
    for backend in BACKENDS:
        ctx.progress.step(f"drain: agentqueue on {backend}")
        systems[f"agentqueue-{backend}"] = await drain_agentqueue(
            ctx, backend, n, ctx.sizes.drain_concurrency
        )
        ctx.progress.done()
    if ctx.peers:
        for peer in PEERS:
            ctx.progress.step(f"drain: {peer.name}")
            peer_n = min(n, ctx.sizes.procrastinate_cap) if peer.name == "procrastinate" else n
            try:
                systems[peer.name] = await run_peer(ctx, peer, peer_n)
            except (ChildError, OSError) as exc:
                systems[peer.name] = {"error": str(exc)}
                errors.append(str(exc))
            ctx.progress.done()
        if n > ctx.sizes.procrastinate_cap:
            cap = ctx.sizes.procrastinate_cap
            notes.append(
                f"procrastinate drains a few hundred tasks/s, so it gets N={cap:,} to keep the "
                "run short (a rate, so still comparable)."
            )
        notes.append(
            "Celery's drain time excludes the worker's start-up (from its first fetch to an "
            "empty queue with nothing unacknowledged); the time including start-up is in the JSON."
        )
    else:
        notes.append(f"Peers not run: {ctx.peers_skipped}.")
    return {"n": n, "systems": systems, "notes": notes, "errors": errors}


def drain_rate(result: dict[str, Any], system: str) -> float | None:
    """The drain rate of one system, if it was measured."""
    value = result.get("systems", {}).get(system, {}).get("drain_per_s")
    return None if value is None else float(value)


def rows(result: dict[str, Any]) -> list[Row]:
    """Report rows: every system's drain rate, then the targets."""
    out: list[Row] = []
    for system, data in result.get("systems", {}).items():
        label = LABELS.get(system, system)
        if "error" in data:
            out.append(Row(NAME, label, "failed (see JSON)"))
            continue
        value = data.get("drain_per_s")
        out.append(
            Row(NAME, label, f"{fmt_rate(value)} (N={data.get('n', 0):,})", value),
        )
    pg = drain_rate(result, "agentqueue-postgresql")
    lite = drain_rate(result, "agentqueue-sqlite")
    pgq = drain_rate(result, "pgqueuer")
    pro = drain_rate(result, "procrastinate")
    out += [
        target_row(
            NAME, "agentqueue (PostgreSQL) / pgqueuer", "drain ratio", ratio(pg, pgq), ">=", 4, "x"
        ),
        target_row(
            NAME,
            "agentqueue (PostgreSQL) / procrastinate",
            "drain ratio",
            ratio(pg, pro),
            ">=",
            30,
            "x",
        ),
        target_row(
            NAME,
            "agentqueue (SQLite) / pgqueuer (PostgreSQL)",
            "drain ratio",
            ratio(lite, pgq),
            ">=",
            1,
            "x",
        ),
    ]
    return out
