"""Drain: preload N no-op tasks, then one worker process drains them; every system on the
same N and the same clocks, with planner statistics.

agentqueue is measured as a user runs it: ``agentqueue worker --app
agentqueue.bench.noop_app:queue`` in a subprocess, default flags (and once with
``--concurrency 500``, the default before it was 1000), on PostgreSQL and SQLite; the worker
the bench tunes for draining runs in its own child beside it, for information. Each peer
(``benchmarks/peers/``, run by the ``.peers/`` interpreter) is swept over a small grid of its
own documented knobs and reported at its best setting, every setting kept in the JSON. Then
agentqueue as started and each peer at its best run again, in turn, for ``drain_rounds`` in all
(3; ``--rounds``), and each is reported by its median round: one pass on a shared machine moves
by more than the ratios it is read for.

The clocks, the same for all: from the worker's process start (wall clock, taken just before it
is started) to the last completion the store recorded, the headline; and from the first claim
the store recorded to the last completion, beside it. A system that does not finish all N
within the deadline is reported failed, with no rate.

After every preload each system's tables get planner statistics (ANALYZE, as autovacuum would
on a production server); a second pass without them (agentqueue as started and every peer at
its best setting) is kept for information.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..config import Settings
from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..store.admin import scalar
from .common import (
    Backend,
    BenchContext,
    Row,
    fmt_rate,
    fmt_ratio,
    median_pass,
    mib,
    rate,
    ratio,
    rotated,
    target_row,
)
from .db import analyze as analyze_tables
from .db import count, fresh_url, preload
from .names import NOOP
from .peers import PEERS, Peer, Setting, run_peer
from .procs import Child, ChildError, machine_busy_secs

NAME = "drain"
APP = "agentqueue.bench.noop_app:queue"
"""The app the worker is started with: one no-op async handler."""
WORKER = "`agentqueue worker --app m:queue`"


@dataclass(frozen=True)
class Run:
    """One way agentqueue is run: ``cli`` (the command, as a user starts it) or ``tuned``
    (the bench's drain child, for information)."""

    key: str
    label: str
    backend: Backend
    kind: Literal["cli", "tuned"]
    setting: str
    args: tuple[str, ...] = ()


RUNS: tuple[Run, ...] = (
    Run("agentqueue-postgresql", f"{WORKER} (PostgreSQL)", "postgresql", "cli", "defaults"),
    Run(
        "agentqueue-postgresql-c500", f"{WORKER[:-1]} --concurrency 500` (PostgreSQL)",
        "postgresql", "cli",
        "--concurrency 500", ("--concurrency", "500"),
    ),
    Run("agentqueue-sqlite", f"{WORKER} (SQLite)", "sqlite", "cli", "defaults"),
    Run(
        "agentqueue-tuned-postgresql", "agentqueue, the bench's tuned worker (PostgreSQL)",
        "postgresql", "tuned", "concurrency 1000, 4 claims and 4 outcome writes in flight",
    ),
    Run(
        "agentqueue-tuned-sqlite", "agentqueue, the bench's tuned worker (SQLite)", "sqlite",
        "tuned", "concurrency 1000, 4 claims and 4 outcome writes in flight",
    ),
)  # fmt: skip
HEADLINE = "agentqueue-postgresql"
"""The system every peer is compared with: the worker a user starts, on PostgreSQL."""
LABELS: dict[str, str] = {
    **{r.key: r.label for r in RUNS},
    **{p.name: p.label.replace(" (", f" {p.version} (", 1) for p in PEERS},
}


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    peers = sum(len(peer_settings(ctx, p)) + 1 for p in PEERS) if ctx.peers else 0
    # The rounds after each contender's first pass, and one more for each peer its sweep picks
    # (its sweep's pass is not a round: it drains every round afresh, see more_rounds).
    again = sum(len(peer_settings(ctx, p)) > 1 for p in PEERS) if ctx.peers else 0
    return len(RUNS) + 1 + peers + (ctx.sizes.drain_rounds - 1) * len(contenders(ctx)) + again


def peer_settings(ctx: BenchContext, peer: Peer) -> tuple[Setting, ...]:
    """The settings a peer is run at: its whole grid, or only its quick one without a sweep."""
    return peer.grid if ctx.sweep else (peer.quick_setting,)


def deadline_secs(n: int) -> float:
    """How long a worker gets to drain ``n`` tasks before it is reported failed: 20 tasks a
    second, two minutes at least."""
    return max(120.0, n / 20)


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
    ctx: BenchContext,
    backend: Backend,
    n: int,
    settings: Mapping[str, Any] | None = None,
    *,
    analyze: bool = True,
) -> tuple[str, float]:
    """Preload ``n`` no-op tasks on a fresh database, submitted under ``settings`` overrides
    (under admission limits they stay pending); return its URL and the submit rate. With
    ``analyze`` (the default) PostgreSQL's tables then get planner statistics, as autovacuum
    would give them after a bulk load; only the drain benchmark's pass for information goes
    without."""
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
    if analyze:
        await analyze_tables(url)
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
    stats = await statistics(url)
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
        "statistics": stats,
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
    analyze: bool = True,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Preload ``n`` no-op tasks on a fresh database, drain them with one worker process; with
    ``analyze`` (the default) the tables get planner statistics after the preload. ``settings``
    (nested as in the configuration file) is given to the preloading queue and laid over the
    worker's."""
    url, enqueue_rate = await preload_fresh(ctx, backend, n, settings, analyze=analyze)
    return await drain_preloaded(ctx, backend, url, n, concurrency, enqueue_rate, settings)


def clocks(
    n: int,
    done: int,
    spawned_at: float,
    first_claim_at: float | None,
    last_done_at: float | None,
    failure: str | None = None,
    machine_cpu_secs: float | None = None,
) -> dict[str, Any]:
    """The figures of one drain from the store's record: failed (no rate) unless all ``n``
    finished; else the rate from process start to the last completion (the headline) and from
    the first claim to the last completion, and with ``machine_cpu_secs`` (the machine's busy
    CPU, every process, from the worker's start until all ``n`` were seen completed:
    procs.machine_busy_secs) the CPU it cost per task, in microseconds."""
    out: dict[str, Any] = {"n": n, "done": done, "machine_cpu_us_per_task": None}
    if failure is None and done < n:
        failure = f"{done:,} of {n:,} tasks finished"
    if failure is None and (first_claim_at is None or last_done_at is None):
        failure = "no claim or completion time recorded"
    if failure is not None:
        out.update(status="failed", error=failure, drain_per_s=None, claim_to_done_per_s=None)
        return out
    assert first_claim_at is not None and last_done_at is not None
    total, claimed = last_done_at - spawned_at, last_done_at - first_claim_at
    out.update(
        status="ok",
        drain_secs=total,
        drain_per_s=rate(n, total),
        claim_to_done_secs=claimed,
        claim_to_done_per_s=rate(n, claimed),
        start_to_first_claim_secs=first_claim_at - spawned_at,
    )
    if machine_cpu_secs is not None:
        out["machine_cpu_us_per_task"] = machine_cpu_secs / n * 1e6
    return out


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


async def store_clock(url: str) -> tuple[int, float | None, float | None]:
    """Tasks completed, the first claim and the last completion (epoch seconds) as the store
    recorded them (``started_at`` and ``finished_at`` of the tasks)."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            row = conn.execute(
                "SELECT count(*), min(started_at), max(finished_at) FROM aq_tasks "
                "WHERE state = 'completed'"
            ).fetchone()
        return int(row[0]), _micros(row[1]), _micros(row[2])
    done = await scalar(url, "SELECT count(*) FROM aq_tasks WHERE state = 'completed'")
    first = await scalar(url, "SELECT extract(epoch FROM min(started_at)) FROM aq_tasks")
    last = await scalar(
        url, "SELECT extract(epoch FROM max(finished_at)) FROM aq_tasks WHERE state = 'completed'"
    )
    return int(done), _float(first), _float(last)


def _micros(value: int | None) -> float | None:
    return None if value is None else value / 1_000_000


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


async def statistics(url: str) -> dict[str, Any] | None:
    """What PostgreSQL's planner knows about the task table (None on SQLite): ``reltuples``
    (-1 or 0 before any ANALYZE) and ``last_analyze``."""
    if url.startswith("sqlite:"):
        return None
    tuples = await scalar(url, "SELECT reltuples FROM pg_class WHERE relname = 'aq_tasks'")
    last = await scalar(
        url, "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'aq_tasks'"
    )
    return {
        "table": "aq_tasks",
        "reltuples": _float(tuples),
        "last_analyze": None if last is None else str(last),
    }


def agentqueue_command() -> list[str]:
    """How a user starts the command: the ``agentqueue`` script beside this interpreter."""
    script = Path(sys.executable).parent / "agentqueue"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentqueue.cli"]


async def _until_done(queue: AsyncQueue, child: Child, n: int, deadline: float) -> str | None:
    """Wait until the store shows ``n`` tasks completed; why not, if the worker exits first or
    the deadline passes. (Looks four times a second: the clock is the store's record.)"""
    started = time.monotonic()
    while True:
        if await count(queue, TaskState.COMPLETED) >= n:
            return None
        if child.proc.returncode is not None:
            return f"the worker exited with code {child.proc.returncode}"
        if time.monotonic() - started > deadline:
            return f"not finished within {deadline:.0f}s"
        await asyncio.sleep(0.25)


async def as_started(
    ctx: BenchContext, run: Run, n: int, analyze: bool, deadline: float
) -> dict[str, Any]:
    """Preload ``n`` no-op tasks on a fresh database (ANALYZE after, with ``analyze``), start
    ``agentqueue worker --app ...`` as a user does, and time it by the store's record."""
    url, enqueue_rate = await preload_fresh(ctx, run.backend, n, analyze=analyze)
    stats = await statistics(url)
    env = dict(os.environ)
    env["AQ_BENCH_APP_DB"] = url
    cmd = [*agentqueue_command(), "worker", "--app", APP, *run.args]
    busy = machine_busy_secs()
    spawned = time.time()
    child = await Child.start_command(cmd, ctx.work_dir, run.key, env)
    queue = AsyncQueue(url, actor="bench")
    exit_error = None
    try:
        failure = await _until_done(queue, child, n, deadline)
        busy = machine_busy_secs() - busy  # up to the moment all N were seen completed
    finally:
        await queue.close()
        child.terminate()
        try:
            await child.wait(30)
        except ChildError as exc:
            exit_error = str(exc).splitlines()[0]
    done, first, last = await store_clock(url)
    return {
        "system": run.key,
        "store": run.backend,
        "setting": run.setting,
        "command": "agentqueue worker --app m:queue" + "".join(f" {a}" for a in run.args),
        "enqueue_per_s": enqueue_rate,
        "analyzed": analyze,
        "statistics": stats,
        "worker_exit": exit_error,
        **clocks(n, done, spawned, first, last, failure, busy),
    }


async def tuned(ctx: BenchContext, run: Run, n: int, analyze: bool) -> dict[str, Any]:
    """The bench's tuned drain child on a fresh preload, by the same clocks; its own figure
    (worker start, in its process, to the last completion) beside them."""
    url, enqueue_rate = await preload_fresh(ctx, run.backend, n, analyze=analyze)
    stats = await statistics(url)
    spawned = time.time()
    failure, inner = None, {}
    try:
        inner = await drain_preloaded(
            ctx, run.backend, url, n, ctx.sizes.drain_concurrency, enqueue_rate
        )
    except ChildError as exc:
        failure = str(exc).splitlines()[0]
    done, first, last = await store_clock(url)
    return {
        "system": run.key,
        "store": run.backend,
        "setting": run.setting,
        "enqueue_per_s": enqueue_rate,
        "analyzed": analyze,
        "statistics": stats,
        "worker_start_per_s": inner.get("drain_per_s"),
        "cpu_percent": inner.get("cpu_percent"),
        "peak_rss_mib": inner.get("peak_rss_mib"),
        **clocks(n, done, spawned, first, last, failure),
    }


async def peer_run(
    ctx: BenchContext,
    peer: Peer,
    setting: Setting,
    n: int,
    analyze: bool,
    deadline: float,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One peer at one setting, by the same clocks. A driver that fails to run at all raises
    ChildError; a worker that does not finish all ``n`` is reported failed. ``env`` is added
    to the driver's environment."""
    raw = await run_peer(ctx, peer, setting, n, analyze, deadline, env)
    failure = None
    if raw.get("timed_out"):
        failure = f"not finished within {deadline:.0f}s"
    elif raw.get("worker_exit") not in (0, None) and int(raw.get("done", 0)) < n:
        failure = f"the worker exited with code {raw['worker_exit']}"
    return {
        "system": peer.name,
        "setting": setting.label,
        "knobs": setting.knobs,
        "version": peer.version,
        "enqueue_per_s": raw.get("enqueue_per_s"),
        "analyzed": analyze,
        "statistics": raw.get("statistics"),
        "worker_exit": raw.get("worker_exit"),
        **clocks(
            n,
            int(raw.get("done", 0)),
            float(raw["spawned_at"]),
            raw.get("first_claim_at"),
            raw.get("last_done_at"),
            failure,
            raw.get("machine_cpu_secs"),
        ),
    }


def best(entries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The setting with the highest headline rate among those that finished."""
    ok = [e for e in entries if e.get("status") == "ok" and e.get("drain_per_s") is not None]
    return max(ok, key=lambda e: float(e["drain_per_s"])) if ok else None


async def sweep(
    ctx: BenchContext,
    peer: Peer,
    settings: Sequence[Setting],
    n: int,
    analyze: bool,
    errors: list[str],
) -> dict[str, Any]:
    """Run ``peer`` at every one of ``settings``; its best setting, with every setting's
    figures under ``sweep`` (failed when none finished)."""
    entries: list[dict[str, Any]] = []
    for setting in settings:
        ctx.progress.step(f"drain: {peer.name} {setting.label}{'' if analyze else ', no stats'}")
        try:
            entries.append(await peer_run(ctx, peer, setting, n, analyze, deadline_secs(n)))
        except (ChildError, OSError) as exc:
            first = str(exc).splitlines()[0]
            errors.append(f"{peer.name} {setting.label}: {first}")
            entries.append(
                {"system": peer.name, "setting": setting.label, "knobs": setting.knobs,
                 "status": "failed", "error": first, "n": n, "drain_per_s": None}
            )  # fmt: skip
        ctx.progress.done()
    top = best(entries)
    if top is None:
        top = {
            "system": peer.name,
            "status": "failed",
            "error": "no setting finished all N",
            "n": n,
            "drain_per_s": None,
            "setting": ", ".join(e["setting"] for e in entries),
        }
    return {**top, "sweep": entries}


async def run(ctx: BenchContext) -> dict[str, Any]:
    """The drain of every system: agentqueue as started (and tuned, for information), each
    peer swept over its grid, all with statistics; more rounds of agentqueue as started and of
    each peer at its best (more_rounds); then again without statistics (agentqueue as started
    and every peer at its best setting), for information."""
    n = ctx.sizes.drain_n
    deadline = deadline_secs(n)
    systems: dict[str, Any] = {}
    errors: list[str] = []
    for r in RUNS:
        ctx.progress.step(f"drain: {r.label} {r.setting}")
        if r.kind == "cli":
            systems[r.key] = await as_started(ctx, r, n, True, deadline)
        else:
            systems[r.key] = await tuned(ctx, r, n, True)
        if systems[r.key]["status"] != "ok":
            errors.append(f"{r.key} ({r.setting}): {systems[r.key]['error']}")
        ctx.progress.done()
    plain: dict[str, Any] = {}
    if ctx.peers:
        for peer in PEERS:
            systems[peer.name] = await sweep(ctx, peer, peer_settings(ctx, peer), n, True, errors)
    await more_rounds(ctx, systems, n, errors)
    ctx.progress.step("drain: without statistics (information)")
    head = next(r for r in RUNS if r.key == HEADLINE)
    plain[HEADLINE] = await as_started(ctx, head, n, False, deadline)
    ctx.progress.done()
    if ctx.peers:
        for peer in PEERS:
            top = systems[peer.name]
            chosen = [s for s in peer_settings(ctx, peer) if s.label == top.get("setting")]
            if chosen:
                plain[peer.name] = await sweep(ctx, peer, chosen, n, False, errors)
            else:
                ctx.progress.done()
    result: dict[str, Any] = {
        "n": n,
        "deadline_secs": deadline,
        "sweep": ctx.sweep,
        "systems": systems,
        "no_statistics": plain,
        "notes": notes(ctx, n),
        "errors": errors,
    }
    result["ratios"] = ratios(result)
    result["markdown"] = tables(result)
    return result


def contenders(ctx: BenchContext) -> list[str]:
    """The systems the ratios are taken of, each drained in every round: agentqueue as a user
    starts it, and each peer (at its best setting)."""
    return [r.key for r in RUNS if r.kind == "cli"] + ([p.name for p in PEERS] if ctx.peers else [])


async def again(ctx: BenchContext, key: str, setting: str, n: int) -> dict[str, Any]:
    """One more drain of system ``key`` at ``setting`` (a peer's best), with statistics."""
    run = next((r for r in RUNS if r.key == key), None)
    if run is not None:
        return await as_started(ctx, run, n, True, deadline_secs(n))
    peer = next(p for p in PEERS if p.name == key)
    chosen = next(s for s in peer.grid if s.label == setting)
    try:
        return await peer_run(ctx, peer, chosen, n, True, deadline_secs(n))
    except (ChildError, OSError) as exc:
        return {"system": key, "setting": setting, "knobs": chosen.knobs, "status": "failed",
                "error": str(exc).splitlines()[0], "n": n, "drain_per_s": None}  # fmt: skip


def picked(entry: dict[str, Any]) -> bool:
    """Whether ``entry``'s pass was picked from several (a peer's sweep over more than one
    setting): the best of several passes, so not a round of its own. Taken as one, it would
    lean the system's median up by the luck of the sweep."""
    return len(entry.get("sweep", ())) > 1


async def more_rounds(
    ctx: BenchContext, systems: dict[str, Any], n: int, errors: list[str]
) -> None:
    """The rounds (``sizes.drain_rounds``) of every contender that finished its first pass,
    taken in turn, each round starting with the next system; each is then reported by its
    median round (every round's rate in ``rounds_per_s``). A pass that stands alone (agentqueue
    as started, a peer run at one setting) is its first round; a peer picked by a sweep drains
    every round again at the setting picked (see ``picked``). A system that fails a round is
    reported failed, as it would be in the first."""
    keys = [k for k in contenders(ctx) if systems.get(k, {}).get("status") == "ok"]
    taken: dict[str, list[dict[str, Any]]] = {
        k: [] if picked(systems[k]) else [systems[k]] for k in keys
    }
    for turn in range(ctx.sizes.drain_rounds):
        for key in rotated(keys, turn):
            if len(taken[key]) > turn:
                continue  # its first pass is this round
            setting = systems[key]["setting"]
            ctx.progress.step(f"drain: {key} {setting}, round {turn + 1}")
            taken[key].append(await again(ctx, key, setting, n))
            ctx.progress.done()
    for key, results in taken.items():
        kept = {"sweep": systems[key]["sweep"]} if "sweep" in systems[key] else {}
        rates = [r.get("drain_per_s") for r in results]
        failed = [(i, r) for i, r in enumerate(results) if r.get("status") != "ok"]
        if failed:
            i, entry = failed[0]
            errors.append(f"{key} ({entry.get('setting')}), round {i + 1}: {entry.get('error')}")
            systems[key] = {**entry, "error": f"round {i + 1}: {entry.get('error')}",
                            "rounds_per_s": rates, **kept}  # fmt: skip
        else:
            systems[key] = {**median_pass(results), **kept}


def notes(ctx: BenchContext, n: int) -> list[str]:
    """What the reader needs to know to read the drain's figures."""
    out = [
        f"Drain: N={n:,} no-op tasks for every system, preloaded, then one worker process drains "
        "them. Headline clock: from the worker's process start to the last completion the store "
        "recorded; beside it, from the first claim recorded to the last completion. A system "
        "that does not finish all N is reported failed, with no rate.",
        "Every system's tables get planner statistics after each preload (ANALYZE, as "
        "autovacuum would); the pass without them is for information only. SQLite gathers "
        "none by itself and gets none.",
        f"Rounds: {ctx.sizes.drain_rounds}. agentqueue as a user starts it and each peer at its "
        "best setting are drained that many times, in turn, each round starting with the next "
        "system (a peer picked by its sweep drains every round again: the sweep's pass, the best "
        "of several, is not one of them); each is reported by its median round, every "
        "round's rate beside it (JSON: rounds_per_s), and a system that fails a round is "
        "reported failed. The other rows are single passes.",
        f"agentqueue as a user starts it: `agentqueue worker --app {APP}` (one no-op async "
        "handler), default flags unless named; the bench's tuned worker (its own child, "
        "concurrency 1000, 4 claims and 4 outcome writes in flight) is for information.",
    ]
    if ctx.peers:
        grids = "; ".join(
            f"{p.name}: {', '.join(s.label for s in peer_settings(ctx, p))}" for p in PEERS
        )
        out.append(
            f"Each peer is reported at its best setting; settings tried: {grids}. Celery's "
            "completion time is seen by looking at Redis every 5 ms (it records none)."
        )
    else:
        out.append(f"Peers not run: {ctx.peers_skipped}.")
    out.append(
        "Machine CPU per task: the busy CPU time of the whole machine (every process, both "
        "the worker's and the database's; /proc/stat) from the worker's start until all N were "
        "seen completed (agentqueue: by the bench's check every 0.25 s; pgqueuer and "
        "procrastinate: their worker's exit once drained; Celery: its 5 ms look at Redis, "
        "which costs some CPU of its own), divided by N. The bench's tuned worker is not "
        "measured so. The machine's other processes would count too (none run beside a bench)."
    )
    return out


def drain_rate(result: dict[str, Any], system: str) -> float | None:
    """The headline drain rate of one system, if it finished."""
    value = result.get("systems", {}).get(system, {}).get("drain_per_s")
    return None if value is None else float(value)


TARGETS: tuple[tuple[str, str, float | None], ...] = (
    (HEADLINE, "pgqueuer", 1.5),
    (HEADLINE, "procrastinate", 20.0),
    (HEADLINE, "celery", None),
    ("agentqueue-sqlite", "pgqueuer", 1.0),
)
"""(agentqueue run, peer, target ratio or None for information)."""


def ratios(result: dict[str, Any]) -> list[dict[str, Any]]:
    """agentqueue as started against each peer's best setting, headline clocks."""
    systems = result.get("systems", {})
    out = []
    for ours, theirs, target in TARGETS:
        if theirs not in systems:
            continue
        out.append(
            {
                "ours": ours,
                "ours_setting": systems.get(ours, {}).get("setting"),
                "theirs": theirs,
                "theirs_setting": systems[theirs].get("setting"),
                "theirs_status": systems[theirs].get("status"),
                "ratio": ratio(drain_rate(result, ours), drain_rate(result, theirs)),
                "target": target,
            }
        )
    return out


def _figure(entry: dict[str, Any]) -> tuple[str, str, str]:
    if entry.get("status") != "ok":
        return f"failed: {entry.get('error', '?')}", "", ""
    cpu = entry.get("machine_cpu_us_per_task")
    rounds = entry.get("rounds_per_s") or []
    each = f" (rounds: {', '.join(fmt_rate(r) for r in rounds)})" if len(rounds) > 1 else ""
    return (
        fmt_rate(entry.get("drain_per_s")) + each,
        fmt_rate(entry.get("claim_to_done_per_s")),
        "" if cpu is None else f"{cpu:,.0f} us",
    )


def _label(key: str, entry: dict[str, Any]) -> str:
    return LABELS.get(key, key)


def tables(result: dict[str, Any]) -> str:
    """The drain's figures as markdown, in the shape of README's Performance section."""
    n = result["n"]
    head = (
        "| system | setting | process start -> last completion | first claim -> last "
        "completion | machine CPU per task |\n|---|---|---|---|---|"
    )
    lines = [f"### Drain: {n:,} no-op tasks, one worker process, statistics on for all", "", head]
    for key, entry in result["systems"].items():
        total, claimed, cpu = _figure(entry)
        lines.append(
            f"| {_label(key, entry)} | {entry.get('setting', '')} | {total} | {claimed} | {cpu} |"
        )
    lines += ["", "| ratio (process start -> last completion) | figure | target |", "|---|---|---|"]
    for r in result.get("ratios", []):
        ours = f"{LABELS[r['ours']]}, {r['ours_setting']}"
        theirs = f"best {LABELS[r['theirs']]} ({r['theirs_setting']})"
        figure = fmt_ratio(r["ratio"]) if r["theirs_status"] == "ok" else "peer failed"
        target = f">= {r['target']:g}x" if r["target"] is not None else "(information)"
        lines.append(f"| {ours} / {theirs} | {figure} | {target} |")
    swept = [(key, e) for key, entry in result["systems"].items() for e in entry.get("sweep", [])]
    if swept:
        lines += ["", "Every setting tried (statistics on):", "", head]
        for key, e in swept:
            total, claimed, cpu = _figure(e)
            lines.append(
                f"| {_label(key, e)} | {e.get('setting', '')} | {total} | {claimed} | {cpu} |"
            )
    plain = result.get("no_statistics", {})
    if plain:
        lines += ["", "Without statistics (information only):", "", head]
        for key, entry in plain.items():
            total, claimed, cpu = _figure(entry)
            lines.append(
                f"| {_label(key, entry)} | {entry.get('setting', '')} | {total} | {claimed}"
                f" | {cpu} |"
            )
    return "\n".join(lines)


def rows(result: dict[str, Any]) -> list[Row]:
    """Report rows: every system's drain (both clocks, its setting), then the ratios to
    agentqueue as started and the targets on them, then the pass without statistics."""
    out: list[Row] = []
    for key, entry in result.get("systems", {}).items():
        label = f"{LABELS.get(key, key)}, {entry.get('setting', '')}"
        total, claimed, cpu = _figure(entry)
        if entry.get("status") != "ok":
            out.append(Row(NAME, label, total))
            continue
        value = entry.get("drain_per_s")
        spent = f"; machine CPU {cpu} a task" if cpu else ""
        figure = f"{total} (first claim -> last: {claimed}; N={entry.get('n', 0):,}{spent})"
        out.append(Row(NAME, label, figure, value))
    for r in result.get("ratios", []):
        system = f"{LABELS[r['ours']]} / best {LABELS[r['theirs']]} ({r['theirs_setting']})"
        if r["target"] is None:
            out.append(Row(NAME, system, f"drain ratio: {fmt_ratio(r['ratio'])}", r["ratio"]))
        else:
            out.append(target_row(NAME, system, "drain ratio", r["ratio"], ">=", r["target"], "x"))
    for key, entry in result.get("no_statistics", {}).items():
        label = f"{LABELS.get(key, key)}, {entry.get('setting', '')}, no statistics (information)"
        total, _, _ = _figure(entry)
        value = entry.get("drain_per_s") if entry.get("status") == "ok" else None
        out.append(Row(NAME, label, total, value))
    return out
