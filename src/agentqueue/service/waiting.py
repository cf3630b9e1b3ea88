"""Why tasks wait: the facts :mod:`agentqueue.domain.waiting` works from, read once, for one
task (``show``, ``GET /v1/tasks/{id}``) or for everything a process could still run
(``--until-idle``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from uuid import UUID

from ..domain.models import Task
from ..domain.states import TaskState
from ..domain.waiting import (
    WAITING_STATES,
    Facts,
    Reason,
    RouteAnswer,
    Scope,
    Survey,
    keeps,
    reads_facts,
    reads_load,
    why_waiting,
)
from ..store import TaskFilter
from .load import Load
from .runtime import Runtime

S = TaskState

SURVEY_ORDER = (S.EXECUTING, S.QUEUED, S.RETRYING, S.PENDING, S.WAITING_TOOL, S.BLOCKED)
"""States read in this order by :func:`left_for`: those most likely to keep a process busy
first, so a busy queue is told apart with one short read."""

SURVEY_PAGE = 500
MAX_DEPENDENCY_READS = 5
"""Levels of dependencies read below the tasks asked about (deeper ones are taken to move)."""


async def _facts(
    rt: Runtime, tasks: Sequence[Task], scope: Scope | None, *, load: bool = True
) -> Facts:
    """The facts for ``tasks``; without ``load``, no admitted work is read (a count over every
    queued and executing task), and the facts say none."""
    paused = await rt.paused_types(max_age_secs=0.0)
    admitted = Load.count(await rt.store.active_load() if load else [])
    settings = rt.settings
    pipelines = rt.pipelines

    def route(task: Task) -> RouteAnswer:
        found = pipelines.route(task.kind, task)
        return found.agents, found.reason

    return Facts(
        now=rt.clock.now(),
        paused=paused,
        agent_caps={name: a.max_concurrent for name, a in settings.agents.items()},
        agent_load=dict(admitted.by_agent),
        max_active=settings.admission.max_active,
        active=admitted.total,
        claims_admit=settings.claims_admit,
        dependencies=await _dependencies(rt, tasks),
        route=route,
        scope=scope,
    )


async def _dependencies(rt: Runtime, tasks: Iterable[Task]) -> dict[UUID, Task]:
    """The tasks ``tasks`` depend on, and theirs, a few levels down."""
    found: dict[UUID, Task] = {}
    wanted = {d for t in tasks if t.state is S.BLOCKED for d in t.depends_on}
    for _ in range(MAX_DEPENDENCY_READS):
        wanted -= found.keys()
        if not wanted:
            break
        got = await rt.store.get_tasks(sorted(wanted))
        found.update((t.id, t) for t in got)
        wanted = {d for t in got if t.state is S.BLOCKED for d in t.depends_on}
    return found


async def why(rt: Runtime, task: Task) -> list[Reason]:
    """Why ``task`` waits (empty when it is in no waiting state), with only the reads its
    reasons draw on: none for an executing task, say, and no count of the admitted work unless
    it is pending or retrying under a global cap or routed to agents (``GET /v1/tasks/{id}``
    answers with them)."""
    if task.state not in WAITING_STATES:
        return []
    if not reads_facts(task):
        return why_waiting(task, Facts(now=rt.clock.now()))
    max_active = rt.settings.admission.max_active
    load = reads_load(task, max_active, rt.pipelines.route(task.kind, task).agents)
    return why_waiting(task, await _facts(rt, [task], None, load=load))


async def left_for(rt: Runtime, scope: Scope, page: int = SURVEY_PAGE) -> Survey | None:
    """What is left for the process ``scope`` describes: None as soon as one task is found
    that it still waits for (it is not idle), else every waiting task with its reason."""
    result = Survey()
    facts: Facts | None = None
    for state in SURVEY_ORDER:
        before: int | None = None
        while True:
            flt = TaskFilter(states=(state,), limit=page, before_seq=before)
            tasks = await rt.store.list_tasks(flt)
            if not tasks:
                break
            if facts is None or state is S.BLOCKED:
                facts = await _facts(rt, tasks, scope)
            for task in tasks:
                reasons = why_waiting(task, facts)
                if keeps(reasons):
                    return None
                result.add(task, reasons)
            if len(tasks) < page:
                break
            before = tasks[-1].seq
    return result
