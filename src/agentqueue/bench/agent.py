"""Agent: a command agent end to end (``true`` as the agent), and what an attempt costs over a
bare fork+exec of the same command.

Two measurements, each with ``isolation = "none"`` and with the default isolation (unset:
bubblewrap where it works, as a worker decides at start), taken in this one run:

- **End to end**: N tasks of the agent's type preloaded on PostgreSQL (each waits for the
  scheduler, which routes it to the agent), then one worker process, configured with the agent,
  drains them: agent tasks per second, from worker start to the last completion recorded.
- **Per attempt**: in this process, an attempt as the worker runs it (``CommandAgent.run``:
  working directory, launcher, sandbox, the agent, its removal; see ``bench isolation``)
  against a bare fork+exec of the same command (``asyncio.create_subprocess_exec`` and wait),
  taken in turn, ``runs`` times each; the overhead is the attempt's p50 (p99) minus the bare
  fork+exec's p50 (p99). Run as root, the agents run as ``nobody``, as a worker runs them.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..config import AgentSettings, Settings
from ..domain.states import TaskState
from ..executors.isolation import default_user, resolve
from ..executors.subprocess import CommandAgent
from ..queue import AsyncQueue
from .common import BenchContext, Row, fmt_ms, fmt_rate, percentile, target_row
from .db import analyze, count, fresh_url, preload
from .drain import describe, drain_preloaded
from .isolation import POSTGRES_PORT, _attempt_ms

NAME = "agent"
TRUE = shutil.which("true") or "/bin/true"
TASK_TYPE = "bench_agent"
AGENT = "bench_true"
WAYS: dict[str, dict[str, Any]] = {"none": {"isolation": "none"}, "default": {}}
"""The isolation settings measured: ``none``, and unset (the default: bubblewrap where it
works)."""
PYTHON = [sys.executable, "-I", "-S", "-c", "pass"]
"""What the attempt's launcher costs before it runs anything (it is started this way), taken
beside the others to tell where an attempt's time goes."""
OVERHEAD_TARGET_MS = 15.0
"""isolation none: an attempt at most 15 ms over a bare fork+exec, at p50."""


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 1 + len(WAYS)


def sizes(ctx: BenchContext) -> tuple[int, int, int]:
    """Agent tasks per drain, the agent's (and the worker's) concurrency, attempts timed."""
    return (60, 4, 10) if ctx.smoke else (400, 8, 100)


def agent_settings(way: str, concurrency: int) -> dict[str, Any]:
    """The configuration of the one agent, nested as in the configuration file."""
    fields = {"command": [TRUE], "task_types": [TASK_TYPE], "max_concurrent": concurrency}
    return {"agents": {AGENT: {**fields, **WAYS[way]}}}


async def end_to_end(ctx: BenchContext, way: str, n: int, concurrency: int) -> dict[str, Any]:
    """Preload ``n`` agent tasks, drain them with one worker process running the agent."""
    settings = agent_settings(way, concurrency)
    url = await fresh_url(ctx, "postgresql", "agent")
    queue = AsyncQueue(url, actor="bench", settings=Settings(**settings))
    try:
        enqueue_rate = await preload(queue, n, TASK_TYPE)
    finally:
        await queue.close()
    await analyze(url)  # planner statistics, as autovacuum would give after the load
    result = await drain_preloaded(ctx, "postgresql", url, n, concurrency, enqueue_rate, settings)
    queue = AsyncQueue(url, actor="bench")
    try:
        page = await queue.list(state=TaskState.COMPLETED, limit=1)
        routed_to = page.items[0].agent if page.items else None
        completed = await count(queue, TaskState.COMPLETED)
    finally:
        await queue.close()
    if routed_to != AGENT or completed != n:
        raise RuntimeError(f"agent ({way}): {completed} of {n} completed, routed to {routed_to}")
    return {
        "n": n,
        "isolation": describe(WAYS[way]) or "unset (the default)",
        "concurrency": concurrency,
        "agent_tasks_per_s": result["drain_per_s"],
        "drain_secs": result["drain_secs"],
        "worker_cpu_percent": result["cpu_percent"],
        "routed_to": routed_to,
        "statistics": result["statistics"],
    }


async def bare_ms(command: list[str]) -> float:
    """A bare fork+exec of ``command``, waited for, in ms."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*command)
    if await proc.wait() != 0:
        raise RuntimeError(f"{command} failed")
    return (time.perf_counter() - start) * 1000


async def per_attempt(runs: int) -> dict[str, Any]:
    """Attempt wall times of each way and of the bare fork+exec, taken in turn."""
    with tempfile.TemporaryDirectory(prefix="aq-bench-agent-") as tmp:
        agents: dict[str, CommandAgent] = {}
        kinds: dict[str, str] = {}
        for way, fields in WAYS.items():
            settings = AgentSettings(command=[TRUE], task_types=[TASK_TYPE], **fields)
            confinement, fallback = resolve(
                AGENT, settings, user=default_user(), deny_ports=[POSTGRES_PORT]
            )
            kinds[way] = "bubblewrap" if confinement.bwrap else f"none ({fallback or 'asked'})"
            # As a worker builds it: launchers started ahead of the attempts.
            agents[way] = CommandAgent(
                AGENT, settings, Path(tmp) / way, confinement=confinement, warm=True
            )
        times: dict[str, list[float]] = {"bare": [], "python": [], **{way: [] for way in WAYS}}
        try:
            await bare_ms([TRUE])  # one each to warm up, not counted
            await bare_ms(PYTHON)
            for agent in agents.values():
                await _attempt_ms(agent)
            for _ in range(runs):
                times["bare"].append(await bare_ms([TRUE]))
                times["python"].append(await bare_ms(PYTHON))
                for way, agent in agents.items():
                    # Its next launcher has started, as between a worker's attempts of agents
                    # that run longer than a launcher takes to start (not counted).
                    await agent.warm_up()
                    times[way].append(await _attempt_ms(agent))
        finally:
            for agent in agents.values():
                agent.close()
    out: dict[str, Any] = {"runs": runs, "command": TRUE}
    bare = {q: percentile(times["bare"], q) for q in (50, 99)}
    out["bare_fork_exec"] = {"p50_ms": bare[50], "p99_ms": bare[99]}
    out["python_start"] = {q: percentile(times["python"], q) for q in (50, 99)}
    out["python_start"] = {"p50_ms": out["python_start"][50], "p99_ms": out["python_start"][99]}
    for way in WAYS:
        p50, p99 = percentile(times[way], 50), percentile(times[way], 99)
        out[way] = {
            "sandbox": kinds[way],
            "p50_ms": p50,
            "p99_ms": p99,
            "overhead_p50_ms": p50 - bare[50],
            "overhead_p99_ms": p99 - bare[99],
        }
    return out


async def run(ctx: BenchContext) -> dict[str, Any]:
    """Per attempt, then end to end each way."""
    n, concurrency, runs = sizes(ctx)
    ctx.progress.step("agent: attempts against a bare fork+exec")
    attempts = await per_attempt(runs)
    ctx.progress.done()
    drains: dict[str, Any] = {}
    for way in WAYS:
        ctx.progress.step(f"agent: end to end, isolation {way}")
        drains[way] = await end_to_end(ctx, way, n, concurrency)
        ctx.progress.done()
    return {
        "command": TRUE,
        "attempts": attempts,
        "end_to_end": drains,
        "notes": [
            f"End to end: N={n:,} tasks of the agent's type preloaded on PostgreSQL (then "
            "ANALYZE), one worker "
            f"process with one command agent ({TRUE}, max_concurrent {concurrency}, worker "
            f"concurrency {concurrency}); the scheduler routes each task to it; time from worker "
            "start to the last completion recorded.",
            f"Per attempt: {runs} attempts of each way and {runs} bare fork+execs of {TRUE} "
            "(asyncio.create_subprocess_exec, waited for), in turn, in the benchmark process; "
            "overhead = the attempt's p50 (p99) minus the bare fork+exec's p50 (p99). The "
            "agents are built as a worker builds them, with launchers started ahead: before "
            "each attempt the benchmark waits (not counted) until the agent's next launcher is "
            "ready, as it is between the attempts of agents that run longer than a launcher "
            "takes to start. Default "
            f"isolation here: {attempts['default']['sandbox']}. Beside them, the start of an "
            "empty `python -I -S` (how a launcher is started, ahead of its attempt): p50 "
            f"{fmt_ms(attempts['python_start']['p50_ms'])}.",
        ],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """Agent tasks/s each way; attempt overhead over fork+exec each way (target: none)."""
    out: list[Row] = []
    a = result["attempts"]
    out.append(
        Row(
            NAME,
            f"bare fork+exec of {result['command']}",
            f"p50 {fmt_ms(a['bare_fork_exec']['p50_ms'])}, "
            f"p99 {fmt_ms(a['bare_fork_exec']['p99_ms'])} ({a['runs']} runs)",
            a["bare_fork_exec"]["p50_ms"],
        )
    )
    out.append(
        Row(
            NAME,
            "python -I -S -c pass (the launcher's start)",
            f"p50 {fmt_ms(a['python_start']['p50_ms'])}, p99 {fmt_ms(a['python_start']['p99_ms'])}",
            a["python_start"]["p50_ms"],
        )
    )
    for way, figures in result["end_to_end"].items():
        system = f"command agent, isolation {way} ({a[way]['sandbox']})"
        out.append(
            Row(
                NAME,
                system,
                f"end to end: {fmt_rate(figures['agent_tasks_per_s'])} agent tasks "
                f"(N={figures['n']:,}, concurrency {figures['concurrency']})",
                figures["agent_tasks_per_s"],
            )
        )
        over = a[way]
        if way == "none":
            out.append(
                target_row(
                    NAME,
                    system,
                    "attempt over fork+exec, p50",
                    over["overhead_p50_ms"],
                    "<=",
                    OVERHEAD_TARGET_MS,
                    " ms",
                )
            )
            out.append(
                Row(
                    NAME,
                    system,
                    f"attempt over fork+exec, p99: {fmt_ms(over['overhead_p99_ms'])}",
                    over["overhead_p99_ms"],
                )
            )
        else:
            out.append(
                Row(
                    NAME,
                    system,
                    f"attempt over fork+exec: p50 {fmt_ms(over['overhead_p50_ms'])}, "
                    f"p99 {fmt_ms(over['overhead_p99_ms'])}",
                    over["overhead_p50_ms"],
                )
            )
    return out
