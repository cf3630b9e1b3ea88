"""Cost: CPU and peak RSS of a worker process, idle and busy, on PostgreSQL and SQLite.

Idle: a worker (default settings: scheduler steps on, concurrency 10) with nothing to do, watched
for a while once it has started and (on SQLite) has given back the writer process it starts
with, which it does after a few quiet seconds: CPU seconds (utime + stime of /proc/<pid>/stat)
as a percentage of one core, and peak RSS (VmHWM of /proc/<pid>/status), of every process of
the worker added up (the target's figure; were a writer process still there, the pages both
map would be counted twice); beside them the worker's own peak RSS and the PSS of all (each
shared page counted once). Busy: the same figures for a worker process during a drain of N
no-op tasks (concurrency 100), its writer process included.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .common import (
    BACKENDS,
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
from .names import NOOP
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
WRITER_BACK_WITHIN_SECS = 60.0
"""How long an idle SQLite worker is given to end its writer process before it is watched."""


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
        started = time.perf_counter()
        await asyncio.sleep(ctx.sizes.settle_secs)
        # On SQLite the worker starts with its writer in a process, which it gives back once
        # it has been quiet a while: the idle figures are the worker's after that.
        while len(tree_pids(child.pid)) > 1:
            if time.perf_counter() - started > WRITER_BACK_WITHIN_SECS:
                break  # measured as it is: the figures then count the writer process
            await asyncio.sleep(0.1)
        quiet_after = time.perf_counter() - started
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
        "quiet_after_secs": quiet_after,
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
        f"Idle: a worker watched for {ctx.sizes.idle_secs:g} s once started and quiet (on "
        "SQLite, once the writer process it starts with has ended); busy: a worker draining "
        f"{ctx.sizes.busy_n:,} no-op tasks (on PostgreSQL with planner statistics). CPU as % "
        "of one core; RSS is VmHWM; both of all the worker's processes added up."
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
                    f"idle: {quiet['processes']} process(es) after "
                    f"{fmt_value(quiet.get('quiet_after_secs'), ' s')}; the worker's own peak RSS "
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
