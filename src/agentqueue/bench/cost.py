"""Cost: CPU and peak RSS of a worker process, idle and busy, on PostgreSQL and SQLite.

Idle: a worker (default settings: scheduler steps on, concurrency 10) with nothing to do, watched
for a while once it has started: CPU seconds (utime + stime of /proc/<pid>/stat) as a percentage
of one core, and peak RSS (VmHWM of /proc/<pid>/status), each of the worker and its SQLite
writer process added up (the target's figure; the pages both map, the interpreter's among them,
counted twice); beside them the worker's own peak RSS and the pair's PSS (each shared page
counted once: what they cost the machine's memory). Busy: the same figures for a worker
process during a drain of N no-op tasks (concurrency 100).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .common import (
    BACKENDS,
    NOOP,
    Backend,
    BenchContext,
    Row,
    fmt_value,
    mib,
    per_backend,
    target_row,
)
from .db import fresh_url
from .drain import drain_agentqueue
from .procs import (
    Child,
    peak_rss_bytes,
    tree_cpu_seconds,
    tree_peak_rss_bytes,
    tree_pids,
    tree_pss_bytes,
)

NAME = "cost"
IDLE_CONCURRENCY = 10


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 2 * len(BACKENDS)


async def idle(ctx: BenchContext, backend: Backend) -> dict[str, Any]:
    """Watch an idle worker process."""
    url = await fresh_url(ctx, backend, "idle")
    child = await Child.start(
        "serve",
        {"url": url, "concurrency": IDLE_CONCURRENCY, "task_type": NOOP},
        ctx.work_dir,
        f"idle-{backend}",
    )
    try:
        await child.message("started", within=60)
        await asyncio.sleep(ctx.sizes.settle_secs)
        cpu0, t0 = tree_cpu_seconds(child.pid), time.perf_counter()
        await asyncio.sleep(ctx.sizes.idle_secs)
        cpu1, t1 = tree_cpu_seconds(child.pid), time.perf_counter()
        peak = tree_peak_rss_bytes(child.pid)
        alone = peak_rss_bytes(child.pid)
        pss = tree_pss_bytes(child.pid)
        processes = len(tree_pids(child.pid))
        await child.stop()
    finally:
        await child.kill()
    return {
        "watched_secs": t1 - t0,
        "cpu_secs": cpu1 - cpu0,
        "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "peak_rss_mib": mib(peak),
        "worker_peak_rss_mib": mib(alone),
        "pss_mib": mib(pss),
        "processes": processes,
        "concurrency": IDLE_CONCURRENCY,
    }


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Idle and busy figures on both backends."""
    out: dict[str, Any] = {"systems": {}}
    for backend in BACKENDS:
        ctx.progress.step(f"cost: idle worker on {backend}")
        idle_figures = await idle(ctx, backend)
        ctx.progress.done()
        ctx.progress.step(f"cost: busy worker on {backend}")
        busy = await drain_agentqueue(ctx, backend, ctx.sizes.busy_n, ctx.sizes.drain_concurrency)
        ctx.progress.done()
        out["systems"][backend] = {
            "idle": idle_figures,
            "busy": {
                "n": busy["n"],
                "drain_per_s": busy["drain_per_s"],
                "drain_secs": busy["drain_secs"],
                "cpu_secs": busy["cpu_secs"],
                "cpu_percent": busy["cpu_percent"],
                "peak_rss_mib": busy["peak_rss_mib"],
            },
        }
    out["notes"] = [
        f"Idle: a worker watched for {ctx.sizes.idle_secs:g} s after start-up; busy: a worker "
        f"draining {ctx.sizes.busy_n:,} no-op tasks (on PostgreSQL with planner statistics). "
        "CPU as % of one core; RSS is VmHWM; on SQLite both are the worker's and its writer "
        "process's added up."
    ]
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """Idle targets (CPU < 1% of a core, RSS < 60 MiB) on each backend; busy for information."""
    out: list[Row] = []
    for _, system, data in per_backend(result):
        quiet, busy = data["idle"], data["busy"]
        out.append(target_row(NAME, system, "idle CPU", quiet["cpu_percent"], "<", 1, "%"))
        out.append(
            target_row(NAME, system, "idle peak RSS", quiet["peak_rss_mib"], "<", 60, " MiB")
        )
        if quiet.get("pss_mib") is not None:
            out.append(
                Row(
                    NAME,
                    system,
                    f"idle: {quiet['processes']} process(es); the worker's own peak RSS "
                    f"{fmt_value(quiet['worker_peak_rss_mib'], ' MiB')}, PSS of all "
                    f"{fmt_value(quiet['pss_mib'], ' MiB')} (shared pages counted once)",
                    quiet["pss_mib"],
                )
            )
        out.append(
            Row(
                NAME,
                system,
                f"busy: CPU {fmt_value(busy['cpu_percent'], '%')} of a core, peak RSS "
                f"{fmt_value(busy['peak_rss_mib'], ' MiB')} (draining {busy['n']:,})",
                busy["cpu_percent"],
            )
        )
    return out
