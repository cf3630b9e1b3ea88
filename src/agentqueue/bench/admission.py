"""Admission: the drain and the dispatch latency re-run with admission limits on, against the
same figures with them off, both taken in this one run.

Without limits (the default) a task is admitted as it is submitted. With a cap
(``admission.max_active``) nothing is admitted at submit: tasks stay pending until the scheduler
inside a worker (the one holding the leadership lease) admits them through the limited planner,
which counts queued and executing work against the cap. This benchmark shows what that costs.

For each backend: the drain benchmark's drain (same N, same worker concurrency and tuning) with
admission off and on, in rounds taken in turn (each way's median reported); then the latency
benchmark's measurement, off, then on. "On" gives
``admission.max_active`` both to the queue that submits in this process and to the worker
process. The on passes are checked: every preloaded task must still be pending, the worker must
report its admission limited, and a task's admit event must come from the scheduler, after its
submit event; if not, the benchmark fails rather than report figures of the wrong path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..worker.tuning import ASYNC_CONCURRENCY
from .common import (
    BACKENDS,
    Backend,
    BenchContext,
    Row,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    median_pass,
    per_backend,
    ratio,
    rotated,
    target_row,
)
from .db import count
from .drain import describe, drain_preloaded, preload_fresh
from .latency import WORKER_CONCURRENCY, admit_trail, measure

NAME = "admission"
MAX_ACTIVE = 2 * ASYNC_CONCURRENCY
"""Twice the drain's concurrency: a cap one worker's slots (with outcomes not yet written,
whose tasks still count as executing) never reach, so the pass measures what admitting costs,
not the cap holding the worker back."""
LIMITS: dict[str, Any] = {"admission": {"max_active": MAX_ACTIVE}}
"""The settings of the "on" passes, nested as in the configuration file."""
DRAIN_RATIO_TARGET = 0.9
"""Admission on may cost at most 10% of the drain rate (PostgreSQL)."""


class AdmissionNotOn(RuntimeError):
    """An "on" pass was not admitted under the limit (it was admitted at submit)."""


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return (2 * ctx.sizes.drain_rounds + 2) * len(BACKENDS)


async def drain_pass(ctx: BenchContext, backend: Backend, on: bool) -> dict[str, Any]:
    """The drain benchmark's drain, with the admission limits when ``on``; with how many tasks
    were pending after the preload and how the newest one got admitted."""
    return await traced_drain(ctx, backend, LIMITS if on else None)


async def traced_drain(
    ctx: BenchContext, backend: Backend, settings: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The drain benchmark's drain under ``settings`` overrides, with how many tasks were
    pending after the preload and how the newest one got admitted (the facts that tell
    admission under the limits from admission at submit)."""
    n = ctx.sizes.drain_n
    url, enqueue_rate = await preload_fresh(ctx, backend, n, settings)
    queue = AsyncQueue(url, actor="bench")
    try:
        pending = await count(queue, TaskState.PENDING)
    finally:
        await queue.close()
    result = await drain_preloaded(
        ctx, backend, url, n, ctx.sizes.drain_concurrency, enqueue_rate, settings
    )
    queue = AsyncQueue(url, actor="bench")
    try:
        trail = await admit_trail(queue)
    finally:
        await queue.close()
    return {**result, "pending_after_preload": pending, "admit_trail": trail}


def admitted_later(trail: dict[str, Any] | None) -> bool:
    """Whether a task was admitted under the limits, as a step of its own after the submit
    (admitted at submit, both events carry the submit time and the submitter): by the
    scheduler, or by a worker's claim (a global cap alone: Settings.claims_admit)."""
    if not trail or trail.get("admit_actor") in (None, trail.get("submit_actor")):
        return False
    gap, admit_seq, submit_seq = (
        trail.get("admit_after_submit_ms"),
        trail.get("admit_seq"),
        trail.get("submit_seq"),
    )
    if gap is None or admit_seq is None or submit_seq is None:
        return False
    return bool(gap > 0 and admit_seq > submit_seq)


def check_on(backend: Backend, drain_on: dict[str, Any], latency_on: dict[str, Any]) -> None:
    """Raise AdmissionNotOn unless both "on" passes went through the limited admission."""
    n = drain_on["n"]
    problems: list[str] = []
    if drain_on["pending_after_preload"] != n:
        problems.append(
            f"{drain_on['pending_after_preload']} of {n} tasks pending after the preload"
        )
    if drain_on.get("worker_admission_limited") is not True:
        problems.append("the drain worker's admission was not limited")
    if not admitted_later(drain_on.get("admit_trail")):
        problems.append(
            f"a drained task was not admitted after its submit: {drain_on['admit_trail']}"
        )
    if latency_on.get("worker_admission_limited") is not True:
        problems.append("the latency worker's admission was not limited")
    if not admitted_later(latency_on.get("admit_trail")):
        problems.append(
            f"a latency task was not admitted after its submit: {latency_on['admit_trail']}"
        )
    if problems:
        raise AdmissionNotOn(f"admission on {backend}: " + "; ".join(problems))


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Drain and latency, admission off then on, on both backends; fails if an "on" pass was
    not admitted under the limit."""
    systems: dict[str, Any] = {}
    sanity: dict[str, Any] = {}
    for backend in BACKENDS:
        figures: dict[str, Any] = {}
        drains: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for turn in range(ctx.sizes.drain_rounds):
            # Off and on in turn, each round starting with the other: the ratio of medians is
            # what one busy minute of a shared machine moves least.
            for on in rotated([False, True], turn):
                what = "on" if on else "off"
                ctx.progress.step(
                    f"admission: drain on {backend}, admission {what}, round {turn + 1}"
                )
                drains[on].append(await drain_pass(ctx, backend, on))
                ctx.progress.done()
        for on, results in drains.items():
            figures[f"drain_{'on' if on else 'off'}"] = median_pass(results)
        for on in (False, True):
            what = "on" if on else "off"
            ctx.progress.step(f"admission: latency on {backend}, admission {what}")
            figures[f"latency_{what}"] = await measure(ctx, backend, LIMITS if on else None)
            ctx.progress.done()
        figures["drain_ratio"] = ratio(
            figures["drain_on"]["drain_per_s"], figures["drain_off"]["drain_per_s"]
        )
        systems[backend] = figures
        for drained in drains[True]:  # every round of it, not only the median's
            check_on(backend, drained, figures["latency_on"])
        drain_on, drain_off = figures["drain_on"], figures["drain_off"]
        sanity[backend] = {
            "admission_on": True,
            "n": drain_on["n"],
            "pending_after_preload_on": drain_on["pending_after_preload"],
            "pending_after_preload_off": drain_off["pending_after_preload"],
            "drain_worker_admission_limited": drain_on["worker_admission_limited"],
            "latency_worker_admission_limited": figures["latency_on"]["worker_admission_limited"],
            "drain_admit_on": drain_on["admit_trail"],
            "drain_admit_off": drain_off["admit_trail"],
            "latency_admit_on": figures["latency_on"]["admit_trail"],
        }
    sizes = ctx.sizes
    notes = [
        f"Admission on: {describe(LIMITS)}, given to the queue that submits (under limits nothing "
        "is admitted at submit, so tasks stay pending) and to the worker process, whose claims "
        "admit what they take under the cap alone (Settings.claims_admit), counting queued + "
        "executing against it under the admission lock. Admission off: the "
        "default settings, where a task is admitted as it is submitted.",
        f"Drain as in the drain benchmark (N={sizes.drain_n:,}, one worker process, concurrency "
        f"{sizes.drain_concurrency}), admission off and on in {sizes.drain_rounds} round(s), "
        "in turn, each round starting with the other way, each drain on a fresh database (on "
        "PostgreSQL with planner statistics: ANALYZE after the preload); each way's median rate "
        "reported, every round's in the JSON (rounds_per_s). The cap "
        f"({MAX_ACTIVE:,}) is above the worker's concurrency, so it never idles the worker by "
        "itself: the difference is the cost of admitting in the claim (the lock, the count, the "
        "admit event and its hash).",
        f"Latency as in the latency benchmark ({sizes.latency_rate:g}/s for "
        f"{sizes.latency_secs:g} s, worker concurrency {WORKER_CONCURRENCY}), off then on; on, a "
        "task's path is submit (pending), notification, a claim that admits it. The targets hold "
        "on PostgreSQL; SQLite is for information.",
        "Checked on every on pass (JSON: sanity): all N tasks pending after the preload (none "
        "with admission off), the worker reports its admission limited, and a task's admit "
        "event is a step after its submit event, not the submitter's (a worker's claim).",
    ]
    return {"max_active": MAX_ACTIVE, "systems": systems, "sanity": sanity, "notes": notes}


def rows(result: dict[str, Any]) -> list[Row]:
    """Per backend: both drain rates and their ratio, latency on and off; the targets (drain
    on/off >= 0.9x, p50 <= 5 ms and p99 <= 25 ms with admission on) hold on PostgreSQL."""
    out: list[Row] = []
    for backend, system, data in per_backend(result):
        off, on = data["drain_off"], data["drain_on"]
        for what, figures in (("off", off), ("on", on)):
            value = figures["drain_per_s"]
            out.append(
                Row(
                    NAME,
                    system,
                    f"drain, admission {what}: {fmt_rate(value)} (N={figures['n']:,})",
                    value,
                )
            )
        value = data["drain_ratio"]
        lat_on, lat_off = data["latency_on"], data["latency_off"]
        if backend == "postgresql":
            out += [
                target_row(NAME, system, "drain on/off", value, ">=", DRAIN_RATIO_TARGET, "x"),
                target_row(NAME, system, "p50, admission on", lat_on["p50_ms"], "<=", 5, " ms"),
                target_row(NAME, system, "p99, admission on", lat_on["p99_ms"], "<=", 25, " ms"),
            ]
        else:
            out += [
                Row(NAME, system, f"drain on/off: {fmt_ratio(value)}", value),
                Row(
                    NAME,
                    system,
                    f"latency, admission on: p50 {fmt_ms(lat_on['p50_ms'])}, "
                    f"p99 {fmt_ms(lat_on['p99_ms'])}",
                    lat_on["p99_ms"],
                ),
            ]
        out.append(
            Row(
                NAME,
                system,
                f"latency, admission off: p50 {fmt_ms(lat_off['p50_ms'])}, "
                f"p99 {fmt_ms(lat_off['p99_ms'])}",
                lat_off["p99_ms"],
            )
        )
    return out
