"""Drain: preload N no-op tasks, then one worker process drains them.

agentqueue runs on PostgreSQL and on SQLite: this process preloads with submit_many (and, in
the second pass, gathers statistics), then starts a worker process (a no-op async handler,
concurrency 500), which times itself from worker start until every task is completed and
recorded. The peers do the same work with their own drivers (``benchmarks/peers/``), run by
the ``.peers/`` interpreter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Settings
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
from .db import analyze as analyze_tables
from .db import count, fresh_url, preload
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


def describe(settings: Mapping[str, Any], prefix: str = "") -> str:
    """Settings overrides as ``admission.max_active = 1000`` (dotted paths, comma-separated)."""
    parts: list[str] = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            parts.append(describe(value, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key} = {value}")
    return ", ".join(parts)


async def preload_fresh(
    ctx: BenchContext, backend: Backend, n: int, settings: Mapping[str, Any] | None = None
) -> tuple[str, float]:
    """Preload ``n`` no-op tasks on a fresh database, submitted under ``settings`` overrides
    (under admission limits they stay pending); return its URL and the submit rate."""
    url = await fresh_url(ctx, backend, "drain")
    queue = (
        AsyncQueue(url, actor="bench", settings=Settings(**settings))
        if settings
        else AsyncQueue(url, actor="bench")
    )
    try:
        bar = ctx.progress.inner(n, f"preload {n:,} on {backend}")
        enqueue_rate = await preload(queue, n, NOOP, bar)
        bar.close()
    finally:
        await queue.close()
    return url, enqueue_rate


async def drain_preloaded(
    ctx: BenchContext,
    backend: Backend,
    url: str,
    n: int,
    concurrency: int,
    enqueue_rate: float,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Drain the ``n`` tasks preloaded at ``url`` with one worker process, whose settings get
    the ``settings`` overrides; with overrides, the result names them and says whether the
    worker's admission was limited."""
    args: dict[str, Any] = {"url": url, "n": n, "concurrency": concurrency}
    if settings:
        args["settings"] = dict(settings)
    child = await Child.start("drain", args, ctx.work_dir, f"drain-{backend}")
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
    described = f"one worker process, concurrency {concurrency}"
    if settings:
        described += f", {describe(settings)}"
    out: dict[str, Any] = {
        "n": n,
        "store": backend,
        "settings": described,
        "enqueue_per_s": enqueue_rate,
        "drain_per_s": rate(n, elapsed),
        "drain_secs": elapsed,
        "cpu_secs": cpu,
        "cpu_percent": 100 * cpu / elapsed if elapsed > 0 else None,
        "peak_rss_mib": mib(result.get("peak_rss_bytes")),
    }
    if settings:
        out["overrides"] = dict(settings)
        out["worker_admission_limited"] = result.get("admission_limited")
    return out


async def drain_agentqueue(
    ctx: BenchContext,
    backend: Backend,
    n: int,
    concurrency: int,
    analyze: bool = False,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Preload ``n`` no-op tasks on a fresh database, drain them with one worker process; with
    ``analyze`` the tables get planner statistics after the preload. ``settings`` (nested as in
    the configuration file) is given to the preloading queue and laid over the worker's."""
    url, enqueue_rate = await preload_fresh(ctx, backend, n, settings)
    if analyze:
        await analyze_tables(url)
    return await drain_preloaded(ctx, backend, url, n, concurrency, enqueue_rate, settings)


ANALYZED = "+stats"
"""Suffix of the systems of the second pass, whose tables got planner statistics."""


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Drain on every system, twice when peers run: as each ships (the targets are taken on
    this pass), then with planner statistics gathered after every preload. This server runs
    without autovacuum, so only the second pass gives anyone statistics; agentqueue's plans do
    not depend on them (TID scans and partial indexes), the peers' do. A peer that fails is
    recorded with its error."""
    n = ctx.sizes.drain_n
    systems: dict[str, Any] = {}
    errors: list[str] = []
    notes = [
        "Every system: N no-op tasks preloaded, then one worker process drains them; the time "
        "runs from worker start to the last completion.",
        f"agentqueue's drain worker runs concurrency {ctx.sizes.drain_concurrency}, claims in "
        "batches of 100 with up to 4 claims and 4 outcome writes in flight (a worker tuned to "
        "drain no-op tasks); pgqueuer runs concurrency 20, batch 10, its fastest setting here "
        "(batches of 100 halve its rate).",
    ]
    passes = [False, True] if ctx.peers else [False]
    for analyze in passes:
        suffix = ANALYZED if analyze else ""
        for backend in BACKENDS:
            ctx.progress.step(f"drain: agentqueue on {backend}{suffix}")
            systems[f"agentqueue-{backend}{suffix}"] = await drain_agentqueue(
                ctx, backend, n, ctx.sizes.drain_concurrency, analyze
            )
            ctx.progress.done()
        if not ctx.peers:
            continue
        for peer in PEERS:
            ctx.progress.step(f"drain: {peer.name}{suffix}")
            peer_n = min(n, ctx.sizes.procrastinate_cap) if peer.name == "procrastinate" else n
            try:
                systems[f"{peer.name}{suffix}"] = await run_peer(ctx, peer, peer_n, analyze)
            except (ChildError, OSError) as exc:
                systems[f"{peer.name}{suffix}"] = {"error": str(exc)}
                errors.append(str(exc))
            ctx.progress.done()
    if ctx.peers:
        notes.append(
            f"Systems marked {ANALYZED}: the second pass, with ANALYZE after every preload (this "
            "server runs without autovacuum). The targets are taken on the first pass, where "
            "every system runs as it ships, as in the figures the targets were set against."
        )
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
        base = system.removesuffix(ANALYZED)
        label = LABELS.get(base, base) + (" with statistics" if base != system else "")
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
    pg_s = drain_rate(result, f"agentqueue-postgresql{ANALYZED}")
    lite_s = drain_rate(result, f"agentqueue-sqlite{ANALYZED}")
    for what, ours, theirs in (
        ("agentqueue (PostgreSQL) / pgqueuer, both with statistics", pg_s,
         drain_rate(result, f"pgqueuer{ANALYZED}")),
        ("agentqueue (PostgreSQL) / procrastinate, both with statistics", pg_s,
         drain_rate(result, f"procrastinate{ANALYZED}")),
        ("agentqueue (SQLite) / pgqueuer with statistics", lite_s,
         drain_rate(result, f"pgqueuer{ANALYZED}")),
    ):  # fmt: skip
        value = ratio(ours, theirs)
        if value is not None:
            out.append(Row(NAME, what, f"drain ratio: {value:.2f}x", value))
    return out
