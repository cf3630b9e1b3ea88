"""``agentqueue bench isolation``: what the sandbox adds to the start of an attempt.

Runs one attempt of ``/bin/true`` as a command agent ``runs`` times each unsandboxed
(``isolation = "none"``), under bubblewrap, and under bubblewrap with ``network = true`` (the
Landlock rule closing the PostgreSQL port), and reports each attempt's wall time (p50, p90):
working directory, launcher, sandbox, agent, removal. Run as root, the agents run as
``nobody``, as a worker runs them, through launchers started ahead (each attempt waits, not
counted, until its agent's next launcher is ready, as between the attempts of long agents)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

from ..config import AgentSettings
from ..domain.models import Task
from ..domain.states import TaskState
from ..executors.base import AttemptControl, AttemptEnd
from ..executors.isolation import default_user, resolve
from ..executors.subprocess import CommandAgent

POSTGRES_PORT = 5432


@dataclass(frozen=True)
class Figures:
    """One way of running the agent: attempt wall times in milliseconds."""

    name: str
    runs: int
    wall_p50: float
    wall_p90: float


def _task() -> Task:
    now = datetime.now(UTC)
    return Task(
        id=uuid4(),
        tenant="bench",
        source="api",
        source_id=None,
        title="bench",
        task_type="bench",
        payload={},
        priority=5,
        state=TaskState.EXECUTING,
        max_retries=0,
        retry_count=0,
        timeout_secs=60,
        created_at=now,
        updated_at=now,
        eligible_at=now,
        requested_by="bench",
    )


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _attempt_ms(agent: CommandAgent) -> float:
    start = time.perf_counter()
    result = await agent.run(_task(), AttemptControl(deadline=time.monotonic() + 60))
    if result.end is not AttemptEnd.COMPLETED:
        raise RuntimeError(f"{agent.name}: the attempt did not complete: {result.error}")
    return (time.perf_counter() - start) * 1000


async def _measure(ways: list[tuple[str, dict[str, Any]]], root: Path, runs: int) -> list[Figures]:
    agents = []
    for name, fields in ways:
        settings = AgentSettings(command=["/bin/true"], task_types=["bench"], **fields)
        confinement, _ = resolve(name, settings, user=default_user(), deny_ports=[POSTGRES_PORT])
        # As a worker builds it: launchers started ahead of the attempts.
        agents.append(CommandAgent(name, settings, root, confinement=confinement, warm=True))
    times: list[list[float]] = [[] for _ in agents]
    try:
        for agent in agents:  # one attempt each to warm up, not counted
            await _attempt_ms(agent)
        for _ in range(runs):  # taken in turn, so a change of load weighs on each alike
            for index, agent in enumerate(agents):
                await agent.warm_up()  # its next launcher ready, as between long attempts
                times[index].append(await _attempt_ms(agent))
    finally:
        for agent in agents:
            agent.close()  # the network filter's cgroup
    return [
        Figures(name, runs, _quantile(t, 0.5), _quantile(t, 0.9))
        for (name, _), t in zip(ways, times, strict=True)
    ]


def measure(runs: int = 20) -> list[Figures]:
    """Attempt wall times unsandboxed, under bubblewrap, and under bubblewrap with a network."""
    ways: list[tuple[str, dict[str, Any]]] = [
        ('isolation = "none"', {"isolation": "none"}),
        ('isolation = "bwrap"', {"isolation": "bwrap"}),
        ('isolation = "bwrap", network = true', {"isolation": "bwrap", "network": True}),
    ]
    with tempfile.TemporaryDirectory(prefix="aq-bench-isolation-") as tmp:
        return asyncio.run(_measure(ways, Path(tmp) / "runs", runs))


def report(figures: list[Figures]) -> str:
    """A markdown table, and the ratio of each sandboxed way to the unsandboxed one."""
    base = figures[0].wall_p50
    lines = [
        "| agent | runs | attempt wall p50 (ms) | p90 (ms) | p50 / unsandboxed |",
        "|---|---|---|---|---|",
    ]
    for f in figures:
        lines.append(
            f"| {f.name} | {f.runs} | {f.wall_p50:.0f} | {f.wall_p90:.0f} | "
            f"{f.wall_p50 / base:.2f}x |"
        )
    return "\n".join(lines)
