"""Routed: the drain and the dispatch latency on the path every agent deployment takes.

With agents configured, nothing is admitted at submit: each task waits in pending until the
scheduler inside a worker admits it through the planner, which asks the task's pipeline where
it may go (routing) and counts every agent's cap. This benchmark measures that path against the
same drain with no agents configured, and, beside it, the drain under a global cap alone (the
admission benchmark's "on" pass, reused) against off, all in one run on PostgreSQL.

Routed: six command agents (``true``, ``isolation = "none"``) configured in the settings of the
submitting queue and of the worker process, each declaring a task type of its own. The drained
tasks are no-op tasks of a type no agent declares, run by the worker's no-op handler: routing is
asked for every one (the full planner, not the cap-only statement) and answers "any executor of
its type". A task routed *to* an agent runs that agent's command (a type agents declare cannot
also have a handler): that path is the ``agent`` benchmark's. Every routed pass is checked as
the admission benchmark checks its own: all N pending after the preload, the worker's admission
limited, a task's admit event from the scheduler after its submit event.
"""

from __future__ import annotations

import shutil
from typing import Any

from .admission import LIMITS, admitted_later, drain_pass, traced_drain
from .common import (
    Backend,
    BenchContext,
    Row,
    fmt_ms,
    fmt_rate,
    median_pass,
    ratio,
    rotated,
    target_row,
)
from .drain import describe
from .latency import WORKER_CONCURRENCY, measure

NAME = "routed"
BACKEND: Backend = "postgresql"
AGENTS = 6
TRUE = shutil.which("true") or "/bin/true"
ROUTED: dict[str, Any] = {
    "agents": {
        f"bench_agent_{i}": {
            "command": [TRUE],
            "task_types": [f"bench_agent_type_{i}"],
            "isolation": "none",
        }
        for i in range(AGENTS)
    }
}
"""Six command agents, as the configuration file would name them."""
ROUTED_TARGET = 0.8
CAPPED_TARGET = 0.9
P50_TARGET_MS = 5.0
P99_TARGET_MS = 25.0


class NotRouted(RuntimeError):
    """A routed pass did not go through the scheduler's planner."""


WAYS = ("unrouted", "routed", "capped")


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 3 * ctx.sizes.drain_rounds + 3


async def routed_drain(ctx: BenchContext) -> dict[str, Any]:
    """The drain with the six agents configured, checked to have gone through the planner."""
    result = await traced_drain(ctx, BACKEND, ROUTED)
    result["settings"] = (
        f"one worker process, concurrency {ctx.sizes.drain_concurrency}, {AGENTS} command "
        f"agents configured ({TRUE}, isolation none)"
    )
    return result


def check(drain: dict[str, Any], latency: dict[str, Any]) -> dict[str, Any]:
    """Raise NotRouted unless both routed passes were admitted under their limits after the
    submit (by the scheduler's planner); the facts checked."""
    problems: list[str] = []
    if drain["pending_after_preload"] != drain["n"]:
        problems.append(f"{drain['pending_after_preload']} of {drain['n']} pending after preload")
    for what, figures in (("drain", drain), ("latency", latency)):
        if figures.get("worker_admission_limited") is not True:
            problems.append(f"the {what} worker's admission was not limited")
        if not admitted_later(figures.get("admit_trail")):
            problems.append(f"a {what} task was not admitted after its submit")
    if problems:
        raise NotRouted("routed: " + "; ".join(problems))
    return {
        "n": drain["n"],
        "pending_after_preload": drain["pending_after_preload"],
        "drain_admit": drain["admit_trail"],
        "latency_admit": latency["admit_trail"],
        "worker_admission_limited": True,
    }


async def _drain(ctx: BenchContext, way: str) -> dict[str, Any]:
    """One drain pass of ``way``."""
    if way == "routed":
        return await routed_drain(ctx)
    return await drain_pass(ctx, BACKEND, on=way == "capped")


def _latency(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: figures[k] for k in ("n", "p50_ms", "p90_ms", "p99_ms", "max_ms")}


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Drain unrouted, routed, capped; latency the same three ways (PostgreSQL)."""
    passes: dict[str, dict[str, Any]] = {}
    drains: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    for turn in range(ctx.sizes.drain_rounds):
        # The three drains in turn, each round starting with the next: on a shared machine a
        # ratio of medians over rounds is what one busy minute moves least.
        for way in rotated(WAYS, turn):
            ctx.progress.step(f"routed: drain, {way}, round {turn + 1}")
            drains[way].append(await _drain(ctx, way))
            ctx.progress.done()
    for way, results in drains.items():
        passes[f"drain_{way}"] = median_pass(results)
    for what, settings in (("unrouted", None), ("routed", ROUTED), ("capped", LIMITS)):
        ctx.progress.step(f"routed: latency, {what}")
        passes[f"latency_{what}"] = await measure(ctx, BACKEND, settings)
        ctx.progress.done()
    for drained in drains["routed"]:
        sanity = check(drained, passes["latency_routed"])
    unrouted = passes["drain_unrouted"]["drain_per_s"]
    sizes = ctx.sizes
    return {
        "backend": BACKEND,
        "settings": {
            "routed": describe({"agents": {"<6 agents>": ROUTED["agents"]["bench_agent_0"]}}),
            "agents": list(ROUTED["agents"]),
            "capped": describe(LIMITS),
            "drain_concurrency": sizes.drain_concurrency,
            "latency_rate_per_s": sizes.latency_rate,
            "latency_worker_concurrency": WORKER_CONCURRENCY,
        },
        "passes": passes,
        "rounds": sizes.drain_rounds,
        "routed_ratio": ratio(passes["drain_routed"]["drain_per_s"], unrouted),
        "capped_ratio": ratio(passes["drain_capped"]["drain_per_s"], unrouted),
        "latency": {w: _latency(passes[f"latency_{w}"]) for w in ("unrouted", "routed", "capped")},
        "sanity": sanity,
        "notes": [
            f"PostgreSQL, N={sizes.drain_n:,} no-op tasks, one worker process (concurrency "
            f"{sizes.drain_concurrency}), each pass on a fresh database with planner statistics "
            f"(ANALYZE after the preload); {sizes.drain_rounds} "
            "round(s) of the three drains in turn, each way's median rate reported (every "
            "round's in the JSON, rounds_per_s). Unrouted: default "
            f"settings (admitted at submit). Routed: {AGENTS} command agents configured "
            f"({TRUE}, isolation none, one task type each) in the submitting queue and the "
            "worker: every task waits in pending and the worker's scheduler admits it through "
            "the planner, which routes it (its type is no agent's, so it goes to the no-op "
            f"handler). Capped: {describe(LIMITS)}, no agents (the admission benchmark's pass: "
            "the worker's claims admit).",
            "Dispatch latency: created -> the handler began (as the latency benchmark), "
            f"submitting at {sizes.latency_rate:g}/s for "
            f"{sizes.latency_secs:g} s to an idle worker (concurrency {WORKER_CONCURRENCY}), "
            "the same three ways.",
        ],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """Drain rates, the two ratios and the latency targets of each way."""
    p = result["passes"]
    system = "agentqueue (PostgreSQL)"
    out = [
        Row(
            NAME,
            system,
            f"drain, {what}: {fmt_rate(p[f'drain_{what}']['drain_per_s'])} "
            f"(N={p[f'drain_{what}']['n']:,}, median of "
            f"{', '.join(fmt_rate(r) for r in p[f'drain_{what}']['rounds_per_s'])})",
            p[f"drain_{what}"]["drain_per_s"],
        )
        for what in ("unrouted", "routed", "capped")
    ]
    out += [
        target_row(NAME, system, "routed / unrouted", result["routed_ratio"], ">=", 0.8, "x"),
        target_row(NAME, system, "capped / unrouted", result["capped_ratio"], ">=", 0.9, "x"),
    ]
    for what, figures in result["latency"].items():
        if what == "unrouted":
            out.append(
                Row(
                    NAME,
                    system,
                    f"latency, unrouted: p50 {fmt_ms(figures['p50_ms'])}, "
                    f"p99 {fmt_ms(figures['p99_ms'])}",
                    figures["p99_ms"],
                )
            )
            continue
        out += [
            target_row(NAME, system, f"p50, {what}", figures["p50_ms"], "<=", P50_TARGET_MS, " ms"),
            target_row(NAME, system, f"p99, {what}", figures["p99_ms"], "<=", P99_TARGET_MS, " ms"),
        ]
    return out
