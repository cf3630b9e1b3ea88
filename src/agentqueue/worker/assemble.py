"""Choosing what a worker runs: the queue's registered handlers and the configured agents,
narrowed by the task types and agent names it was asked to serve."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit
from uuid import UUID

from ..config import AgentSettings, Settings
from ..domain.errors import ConfigError
from ..executors.base import Executor
from ..executors.inprocess import Handler, HandlerExecutor, is_async_callable
from ..executors.isolation import Confinement
from ..executors.netfilter import METADATA_ADDRESSES, NetFilterShare
from .tuning import slots_for_handlers

log = logging.getLogger("agentqueue.worker")

_POSTGRES_PORT = 5432


class DatabasePlaces(NamedTuple):
    """What of the queue's database an agent must not reach."""

    files: list[str]
    """The SQLite file (hidden with its directory)."""
    ports: list[int]
    """The PostgreSQL server's TCP ports (closed to a networked agent, on any host)."""
    endpoints: list[tuple[str, int]]
    """The server's address and port, when the URL names an IP address (refused too)."""


def database_places(url: str | None) -> DatabasePlaces:
    """What of the queue's database (at ``url``) an agent must not reach."""
    if not url:
        return DatabasePlaces([], [], [])
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        from ..domain.errors import InvalidInput
        from ..store.sqlite.dialect import parse_sqlite_url

        try:
            path, _ = parse_sqlite_url(url)
        except InvalidInput:
            return DatabasePlaces([], [], [])
        return DatabasePlaces([os.path.abspath(path)], [], [])
    if parts.scheme.startswith("postgres"):
        ports = {_POSTGRES_PORT}
        try:
            if parts.port:
                ports = {parts.port}
        except ValueError:
            pass
        query = parse_qs(parts.query)
        for value in query.get("port", []):
            if value.isdigit():
                ports.add(int(value))
        addresses = []
        for host in [parts.hostname or "", *query.get("host", [])]:
            with contextlib.suppress(ValueError):
                addresses.append(str(ipaddress.ip_address(host)))
        endpoints = [(address, port) for address in addresses for port in sorted(ports)]
        return DatabasePlaces([], sorted(ports), endpoints)
    return DatabasePlaces([], [], [])


def _anchor(command: Sequence[str]) -> list[str]:
    """Agents run in a fresh working directory each, so command words naming files relative to
    where the worker was started (``agents/fix.py``) are made absolute."""
    here = Path.cwd()
    return [
        str(here / word) if not Path(word).is_absolute() and (here / word).exists() else word
        for word in command
    ]


def _chosen_handlers(
    handlers: Mapping[str, Handler],
    task_types: Sequence[str] | None,
    agents: Sequence[str] | None,
) -> dict[str, Handler]:
    """The handlers a worker runs: all, or those of ``task_types``; none when it was asked for
    agents only."""
    if agents and not task_types:
        return {}
    wanted = set(task_types) if task_types else None
    return {t: h for t, h in handlers.items() if wanted is None or t in wanted}


def _chosen_agents(
    settings: Settings, task_types: Sequence[str] | None, agents: Sequence[str] | None
) -> dict[str, list[str]]:
    """The configured agents a worker runs, each with the task types it runs them for: all, or
    those named in ``agents``; only for ``task_types`` when given (an agent left with none
    is not run)."""
    wanted = set(task_types) if task_types else None
    chosen: dict[str, list[str]] = {}
    for name, agent in settings.agents.items():
        if agents and name not in agents:
            continue
        types = [t for t in agent.task_types if wanted is None or t in wanted]
        if types:
            chosen[name] = types
    return chosen


def derived_slots(
    settings: Settings,
    handlers: Mapping[str, Handler],
    task_types: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
) -> tuple[int, int]:
    """The slots of a worker so asked whose concurrency is not set (see worker.tuning): its
    handlers' (500 when all are async, 10 when one runs in a thread, 0 without handlers) and its
    agents' (each agent's ``max_concurrent``, added up)."""
    chosen = _chosen_handlers(handlers, task_types, agents)
    handler_part = slots_for_handlers(
        len(chosen), all(is_async_callable(h) for h in chosen.values())
    )
    agent_part = sum(
        settings.agents[name].max_concurrent
        for name in _chosen_agents(settings, task_types, agents)
    )
    return handler_part, agent_part


def build_executors(
    settings: Settings,
    handlers: Mapping[str, Handler],
    *,
    concurrency: int,
    handler_slots: int | None = None,
    task_types: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
    request_heartbeat: Callable[[UUID], None] = lambda task_id: None,
    database_url: str | None = None,
) -> list[Executor]:
    """Executors for a worker. Without ``agents`` every configured agent runs (and every
    handler); with it, only those agents (and handlers only if ``task_types`` names theirs).
    The handlers run at most ``handler_slots`` at once (their share of derived slots), else
    up to ``concurrency``."""
    if agents:
        unknown = [name for name in agents if name not in settings.agents]
        if unknown:
            known = ", ".join(sorted(settings.agents)) or "none configured"
            raise ConfigError(f"no agent named {unknown[0]!r} (agents: {known})", "agent")
    executors: list[Executor] = []
    chosen = _chosen_handlers(handlers, task_types, agents)
    if chosen:
        executors.append(HandlerExecutor(chosen, handler_slots or concurrency, request_heartbeat))
    unsandboxed: list[str] = []
    metadata_open: list[str] = []
    # One network filter for the worker's networked agents (a cgroup and its BPF programs).
    net_filters = NetFilterShare(database_places(database_url or settings.db).endpoints)
    prompts = settings.prompt_templates()
    for name, types in _chosen_agents(settings, task_types, agents).items():
        agent = settings.agents[name]
        from ..executors.subprocess import CommandAgent

        narrowed = agent.model_copy(update={"task_types": types, "command": _anchor(agent.command)})
        root = Path(settings.worker.workdir or ".agentqueue/runs")
        try:
            confinement, fallback = _confinement(
                settings, name, narrowed, database_url, net_filters
            )
        except ConfigError:
            _close(executors)
            raise
        if fallback is not None:
            unsandboxed.append(f"{name} ({fallback})")
        elif confinement.network and confinement.net_filter_problem is not None:
            metadata_open.append(f"{name} ({confinement.net_filter_problem})")
        executors.append(
            CommandAgent(name, narrowed, root, confinement=confinement, prompts=prompts, warm=True)
        )
    if unsandboxed:
        log.warning(
            "WARNING: bubblewrap cannot sandbox agents here, so these run WITHOUT isolation "
            "(they see the host's files and network as their user): %s. Install bubblewrap, "
            'or set isolation = "none" on each to say this is meant.',
            "; ".join(unsandboxed),
        )
    if metadata_open:
        log.warning(
            "WARNING: the cloud metadata address (%s) is REACHABLE from these networked "
            "agents, which can read the host's cloud credentials there: %s. Run the worker as "
            "root on a host with cgroup v2, or set network = false.",
            " and ".join(METADATA_ADDRESSES),
            "; ".join(metadata_open),
        )
    if task_types:
        wanted = set(task_types)
        served = {t for e in executors for t in e.task_types}
        missing = sorted(wanted - served)
        if missing:
            _close(executors)
            raise ConfigError(f"no handler or agent serves task type {missing[0]!r}", "task_types")
    return executors


def _close(executors: list[Executor]) -> None:
    """Let go of what the executors made (the worker does this when it stops)."""
    for executor in executors:
        close = getattr(executor, "close", None)
        if close is not None:
            close()


def _confinement(
    settings: Settings,
    name: str,
    agent: AgentSettings,
    database_url: str | None,
    net_filters: NetFilterShare,
) -> tuple[Confinement, str | None]:
    from ..executors.isolation import ConfinementError, default_user, hide_for, resolve, user_ids

    run_as = settings.worker.run_as
    user = user_ids(run_as) if run_as else default_user()
    files, ports, _ = database_places(database_url or settings.db)
    hidden = {hide_for(settings.source), hide_for(os.environ.get("AGENTQUEUE_CONFIG") or None)}
    hidden.update(hide_for(f) for f in files)
    try:
        return resolve(
            name,
            agent,
            user=user,
            hidden=sorted(h for h in hidden if h),
            deny_ports=ports,
            net_filters=net_filters,
            keep_workdirs=settings.worker.keep_workdirs,
        )
    except ConfinementError as exc:
        raise ConfigError(str(exc), exc.field) from None
