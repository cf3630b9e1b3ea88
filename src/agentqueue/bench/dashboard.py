"""Dashboard: server-side render time of the overview and the tasks page on PostgreSQL with
1,000,000 tasks in the table.

The table is preloaded with submit_many (the same bulk preload as the other benchmarks), then a
slice of it is admitted, claimed and completed through the public API so the overview's
throughput and latency windows have work to show, and the table is vacuumed and analyzed. The app is
served in this process (its ASGI interface, no network), logged in with an admin token's
session cookie, and each page is requested repeatedly; the figure is the median time from
request to the last byte of the page.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx

from ..api.app import create_app
from ..dashboard.session import COOKIE
from ..queue import AsyncQueue
from ..store.admin import execute
from .common import BenchContext, Row, fmt_ms, percentile, target_row
from .db import complete_some, fresh_url, preload
from .names import NOOP

NAME = "dashboard"
SYSTEM = "agentqueue (PostgreSQL)"
WORKER = "bench-dashboard"
TARGET_MS = 300.0
WARMUP = 3
PAGES = (
    ("overview", "/"),
    ("tasks", "/tasks"),
    ("tasks, state filter", "/tasks?state=completed"),
    ("tasks, text filter", "/tasks?q=bench"),
)


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 2


async def _time_pages(queue: AsyncQueue, renders: int) -> dict[str, Any]:
    made = await queue.create_token("bench-dashboard", role="admin")
    app = create_app(queue)
    out: dict[str, Any] = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://bench", cookies={COOKIE: made.secret}
        ) as http:
            for name, path in PAGES:
                times: list[float] = []
                size = 0
                for i in range(WARMUP + renders):
                    started = time.perf_counter()
                    answer = await http.get(path)
                    elapsed = (time.perf_counter() - started) * 1000
                    if answer.status_code != 200:
                        raise RuntimeError(f"{path} answered {answer.status_code}")
                    size = len(answer.content)
                    if i >= WARMUP:
                        times.append(elapsed)
                out[name] = {
                    "path": path,
                    "renders": len(times),
                    "median_ms": statistics.median(times),
                    "p90_ms": percentile(times, 90),
                    "max_ms": max(times),
                    "bytes": size,
                }
    return out


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Load the table, then time each page."""
    n = ctx.sizes.dashboard_n
    completed = min(ctx.sizes.dashboard_completed, n)
    url = await fresh_url(ctx, "postgresql", "dashboard")
    queue = AsyncQueue(url, actor="bench")
    try:
        ctx.progress.step(f"dashboard: load {n:,} tasks")
        bar = ctx.progress.inner(n, f"dashboard: load {n:,} tasks")
        await preload(queue, n, NOOP, bar)
        bar.close()
        await complete_some(queue, completed, WORKER)
        # The steady state autovacuum keeps: statistics, and a visibility map for
        # index-only counts.
        await execute(url, "VACUUM (ANALYZE) aq_tasks")
        ctx.progress.done()
        ctx.progress.step("dashboard: render pages")
        pages = await _time_pages(queue, ctx.sizes.dashboard_renders)
        ctx.progress.done()
    finally:
        await queue.close()
    await fresh_url(ctx, "postgresql", "dashboard")  # leave no million rows behind
    return {
        "tasks": n,
        "completed": completed,
        "pages": pages,
        "notes": [
            f"{n:,} tasks preloaded with submit_many, {completed:,} of them admitted, claimed "
            "and completed, then VACUUM (ANALYZE); each page requested "
            f"{ctx.sizes.dashboard_renders} times (after {WARMUP} untimed) through the app's "
            "ASGI interface in this process with an admin session: request to last byte."
        ],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """One row per page; the overview and the tasks page held to 300 ms with 1M tasks."""
    n = int(result.get("tasks", 0))
    out = []
    for name, data in result.get("pages", {}).items():
        figure = f"{name} page with {n:,} tasks, median"
        if name in ("overview", "tasks") and n >= 1_000_000:
            out.append(target_row(NAME, SYSTEM, figure, data["median_ms"], "<", TARGET_MS, " ms"))
        else:
            out.append(
                Row(NAME, SYSTEM, f"{figure}: {fmt_ms(data['median_ms'])}", data["median_ms"])
            )
    return out
