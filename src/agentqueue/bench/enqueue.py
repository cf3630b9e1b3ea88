"""Enqueue rate: tasks submitted one at a time (``submit``, one transaction each), and in bulk
(``submit_many``, one statement per 1,000), on PostgreSQL and SQLite, in a fresh process."""

from __future__ import annotations

from typing import Any

from .common import BACKENDS, BenchContext, Row, fmt_rate, per_backend, rate
from .db import fresh_url
from .procs import Child

NAME = "enqueue"


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return len(BACKENDS)


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Both rates on both backends."""
    one, bulk = ctx.sizes.enqueue_one, ctx.sizes.enqueue_bulk
    out: dict[str, Any] = {"systems": {}}
    for backend in BACKENDS:
        ctx.progress.step(f"enqueue: {backend}")
        url = await fresh_url(ctx, backend, "enqueue")
        child = await Child.start(
            "enqueue", {"url": url, "one": one, "bulk": bulk}, ctx.work_dir, f"enqueue-{backend}"
        )
        result = await child.message("result", within=max(300.0, one / 20 + bulk / 500))
        await child.wait(30)
        out["systems"][backend] = {
            "one_at_a_time_n": one,
            "one_at_a_time_per_s": rate(one, float(result["one_secs"])),
            "bulk_n": bulk,
            "bulk_per_s": rate(bulk, float(result["bulk_secs"])),
        }
        ctx.progress.done()
    out["notes"] = [
        "One at a time: each submit is its own transaction (and, on SQLite, its own fsync with "
        "the default synchronous=full). Bulk: one submit_many call."
    ]
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """One row per backend and mode."""
    out: list[Row] = []
    for _, system, data in per_backend(result):
        one, bulk = data["one_at_a_time_per_s"], data["bulk_per_s"]
        out.append(
            Row(
                NAME, system, f"one at a time: {fmt_rate(one)} (N={data['one_at_a_time_n']:,})", one
            )
        )
        out.append(Row(NAME, system, f"bulk: {fmt_rate(bulk)} (N={data['bulk_n']:,})", bulk))
    return out
