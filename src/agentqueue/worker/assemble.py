"""Choosing what a worker runs: the queue's registered handlers and the configured agents,
narrowed by the task types and agent names it was asked to serve."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from uuid import UUID

from ..config import Settings
from ..domain.errors import ConfigError
from ..executors.base import Executor
from ..executors.inprocess import Handler, HandlerExecutor


def _anchor(command: Sequence[str]) -> list[str]:
    """Agents run in a fresh working directory each, so command words naming files relative to
    where the worker was started (``agents/fix.py``) are made absolute."""
    here = Path.cwd()
    return [
        str(here / word) if not Path(word).is_absolute() and (here / word).exists() else word
        for word in command
    ]


def build_executors(
    settings: Settings,
    handlers: Mapping[str, Handler],
    *,
    concurrency: int,
    task_types: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
    request_heartbeat: Callable[[UUID], None] = lambda task_id: None,
) -> list[Executor]:
    """Executors for a worker. Without ``agents`` every configured agent runs (and every
    handler); with it, only those agents (and handlers only if ``task_types`` names theirs)."""
    wanted = set(task_types) if task_types else None
    if agents:
        unknown = [name for name in agents if name not in settings.agents]
        if unknown:
            known = ", ".join(sorted(settings.agents)) or "none configured"
            raise ConfigError(f"no agent named {unknown[0]!r} (agents: {known})", "agent")
    executors: list[Executor] = []
    chosen = {t: h for t, h in handlers.items() if wanted is None or t in wanted}
    if agents and wanted is None:
        chosen = {}
    if chosen:
        executors.append(HandlerExecutor(chosen, concurrency, request_heartbeat))
    for name, agent in settings.agents.items():
        if agents and name not in agents:
            continue
        types = [t for t in agent.task_types if wanted is None or t in wanted]
        if not types:
            continue
        from ..executors.subprocess import CommandAgent

        narrowed = agent.model_copy(update={"task_types": types, "command": _anchor(agent.command)})
        root = Path(settings.worker.workdir or ".agentqueue/runs")
        executors.append(CommandAgent(name, narrowed, root))
    if wanted is not None:
        served = {t for e in executors for t in e.task_types}
        missing = sorted(wanted - served)
        if missing:
            raise ConfigError(f"no handler or agent serves task type {missing[0]!r}", "task_types")
    return executors
