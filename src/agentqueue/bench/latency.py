"""Dispatch latency: an idle worker process waits; this process submits tasks one at a time at a
steady rate; its no-op handler returns the wall-clock time it began. Afterwards every task is
read back, and created -> the handler began is reported as p50 and p99 (the targets); beside
it, created -> ``started_at`` as recorded, which is the time of the transaction that claimed
the task, taken as that transaction began (so earlier than the handler's start by that
transaction and the hand-off to the handler).

The path measured is the real one. With the default settings a task is admitted as it is
submitted (queued), then notification, claim (executing, ``started_at``). Under admission limits
(``measure`` with settings, as the admission benchmark runs it) the path is longer: submit
(pending), notification, the worker's scheduler step admits it (queued), notification, claim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..domain.states import Action, TaskState
from ..queue import AsyncQueue
from .common import (
    BACKENDS,
    Backend,
    BenchContext,
    Row,
    fmt_ms,
    per_backend,
    percentile,
    target_row,
)
from .db import fresh_url, wait_for_count
from .names import NOOP
from .procs import Child

NAME = "latency"
WORKER_CONCURRENCY = 10


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(BACKENDS)


async def started_minus_created(queue: AsyncQueue) -> tuple[list[float], list[float]]:
    """Of every completed task, in ms (paging through ``list``): created -> its handler began
    (the time the stamping handler returned, same machine's wall clock), and created ->
    started as recorded (the time of the transaction that claimed it, taken as it began)."""
    began: list[float] = []
    recorded: list[float] = []
    cursor: str | None = None
    while True:
        page = await queue.list(state=TaskState.COMPLETED, limit=1000, cursor=cursor)
        for task in page.items:
            created_us = task.created_at.timestamp() * 1e6
            if isinstance(task.result, dict) and "began_at_us" in task.result:
                began.append((task.result["began_at_us"] - created_us) / 1000)
            if task.started_at is not None:
                recorded.append((task.started_at - task.created_at).total_seconds() * 1000)
        cursor = page.next_cursor
        if cursor is None:
            return began, recorded


async def admit_trail(queue: AsyncQueue) -> dict[str, Any]:
    """How the newest completed task got admitted, from its events: the admit event's actor, its
    place after the submit event, and how long after the submit it came (0 ms when it was
    admitted as it was submitted, since both events then carry the submit time)."""
    page = await queue.list(state=TaskState.COMPLETED, limit=1)
    if not page.items:
        return {"task_id": None}
    task = page.items[0]
    events = await queue.events(task.id)
    submit = next((e for e in events if e.action == Action.SUBMIT), None)
    admit = next((e for e in events if e.action == Action.ADMIT), None)
    return {
        "task_id": str(task.id),
        "actions": [str(e.action) for e in events],
        "admit_actor": None if admit is None else admit.actor,
        "submit_actor": None if submit is None else submit.actor,
        "submit_seq": None if submit is None else submit.seq,
        "admit_seq": None if admit is None else admit.seq,
        "admit_after_submit_ms": None
        if admit is None or submit is None
        else (admit.at - submit.at).total_seconds() * 1000,
    }


async def measure(
    ctx: BenchContext, backend: Backend, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Submit at the steady rate to an idle worker; the latency figures of one backend.
    ``settings`` (nested as in the configuration file) is given to the submitting queue and to
    the worker; with it, the result names it and says whether the worker's admission was
    limited."""
    per_sec = ctx.sizes.latency_rate
    n = max(1, round(per_sec * ctx.sizes.latency_secs))
    url = await fresh_url(ctx, backend, "latency")
    args: dict[str, Any] = {
        "url": url,
        "concurrency": WORKER_CONCURRENCY,
        "task_type": NOOP,
        "stamp": True,
    }
    if settings:
        args["settings"] = dict(settings)
    child = await Child.start("serve", args, ctx.work_dir, f"latency-{backend}")
    queue = (
        AsyncQueue(url, actor="bench", settings=Settings(**settings))
        if settings
        else AsyncQueue(url, actor="bench")
    )
    try:
        ready = await child.message("ready", within=60)
        await child.message("started", within=60)
        await queue.open()
        await asyncio.sleep(ctx.sizes.settle_secs)  # the worker is idle now
        begin = time.perf_counter()
        for i in range(n):
            delay = begin + i / per_sec - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.submit(title="bench", task_type=NOOP)
        submit_secs = time.perf_counter() - begin
        await wait_for_count(queue, TaskState.COMPLETED, n, within=60)
        await child.stop()
        values, recorded = await started_minus_created(queue)
        trail = await admit_trail(queue) if settings else None
    finally:
        await child.kill()
        await queue.close()
    out: dict[str, Any] = {
        "n": n,
        "rate_per_s": per_sec,
        "achieved_rate_per_s": n / submit_secs if submit_secs > 0 else None,
        "worker_concurrency": WORKER_CONCURRENCY,
        "measured": len(values),
        "p50_ms": percentile(values, 50),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values) if values else None,
        "mean_ms": sum(values) / len(values) if values else None,
        "recorded_p50_ms": percentile(recorded, 50),
        "recorded_p99_ms": percentile(recorded, 99),
    }
    if settings:
        out["overrides"] = dict(settings)
        out["worker_admission_limited"] = ready.get("admission_limited")
        out["admit_trail"] = trail
    return out


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Latency on PostgreSQL (the target) and SQLite (for information)."""
    out: dict[str, Any] = {"systems": {}}
    for backend in BACKENDS:
        ctx.progress.step(f"latency: {backend}")
        out["systems"][backend] = await measure(ctx, backend)
        ctx.progress.done()
    out["notes"] = [
        f"Tasks submitted one at a time at {ctx.sizes.latency_rate:g}/s for "
        f"{ctx.sizes.latency_secs:g} s to an idle worker process (concurrency "
        f"{WORKER_CONCURRENCY}); created -> the no-op handler began (the wall-clock time it "
        "returns), and created -> started_at as recorded (recorded_p50_ms, recorded_p99_ms)."
    ]
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """p50/p99 rows; the targets hold on PostgreSQL."""
    out: list[Row] = []
    for backend, system, data in per_backend(result):
        if backend == "postgresql":
            out.append(target_row(NAME, system, "p50", data["p50_ms"], "<=", 5, " ms"))
            out.append(target_row(NAME, system, "p99", data["p99_ms"], "<=", 25, " ms"))
        else:
            out.append(
                Row(
                    NAME,
                    system,
                    f"p50: {fmt_ms(data['p50_ms'])}, p99: {fmt_ms(data['p99_ms'])}",
                    data["p99_ms"],
                )
            )
    return out
