"""Reading tasks: get, list (filtered, paged), events, stats."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ..domain.errors import InvalidInput, NotFound
from ..domain.models import Event, Task
from ..domain.states import TaskState
from ..domain.values import storable_text
from ..ids import parse_task_id
from ..store import TaskFilter
from .load import Load
from .runtime import Runtime

MAX_PAGE = 1000


@dataclass(frozen=True)
class TaskPage:
    """One page of tasks, newest first; pass ``next_cursor`` to get the next page."""

    items: list[Task]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        """``{"items": [task, ...], "next": cursor}``, as the API answers a list."""
        return {"items": [t.to_json() for t in self.items], "next": self.next_cursor}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskPage:
        """The page :meth:`to_json` gave."""
        return cls([Task.from_json(t) for t in data["items"]], data.get("next"))


@dataclass(frozen=True)
class Stats:
    """Counts by state (every state present), and the total."""

    by_state: dict[TaskState, int]

    @property
    def total(self) -> int:
        """All tasks."""
        return sum(self.by_state.values())

    def to_json(self) -> dict[str, Any]:
        """``{"by_state": {...}, "total": n}``."""
        return {"by_state": {s.value: n for s, n in self.by_state.items()}, "total": self.total}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stats:
        """The counts :meth:`to_json` gave (the total is worked out again)."""
        return cls({TaskState(s): int(n) for s, n in data["by_state"].items()})


def parse_states(
    value: TaskState | str | Iterable[TaskState | str] | None,
) -> tuple[TaskState, ...]:
    """States named as strings (or given as states); InvalidInput naming ``state`` for an
    unknown one."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str | TaskState) else list(value)
    out = []
    for item in items:
        try:
            out.append(TaskState(item))
        except ValueError:
            known = ", ".join(s.value for s in TaskState)
            raise InvalidInput(f"unknown state {item!r}; one of {known}", "state") from None
    return tuple(out)


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """One name or many as a tuple."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


async def get(rt: Runtime, task_id: UUID, tenant: str | None = None) -> Task:
    """One task; NotFound if it does not exist in ``tenant``."""
    found = await rt.store.get_tasks([task_id], tenant)
    if not found:
        raise NotFound(f"no task {task_id}")
    return found[0]


async def prompt(rt: Runtime, task_id: UUID, tenant: str | None = None) -> str | None:
    """The prompt a command agent is given for this task: its template rendered with the task
    as it is now (``[prompts]`` of these settings); None when no template applies to it.
    InvalidInput naming ``prompt`` when the template cannot be rendered for it."""
    from ..prompts import PromptError

    task = await get(rt, task_id, tenant)
    if not rt.settings.prompts:
        return None  # jinja2 is not even imported
    try:
        return rt.settings.prompt_templates().render_task(task)
    except PromptError as exc:
        raise InvalidInput(str(exc), "prompt") from None


def moment(value: datetime | str | None, field: str) -> datetime | None:
    """A time given as a datetime or as ISO 8601 text (``2026-05-01T09:00:00Z``); one that
    names no offset is UTC. InvalidInput naming ``field`` for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput("must be an ISO 8601 time (2026-05-01T09:00:00Z)", field) from None
    elif not isinstance(value, datetime):
        raise InvalidInput("must be a time (a datetime or ISO 8601 text)", field)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


MAX_CURSOR = 2**63 - 1
"""The largest position either database keeps (a signed 64-bit integer); a cursor is a
position, so it is never negative either."""


def parse_cursor(cursor: str | None) -> int | None:
    """The position a cursor returned by list stands for; InvalidInput naming ``cursor`` for
    anything else (a number out of the databases' range included)."""
    if cursor is None:
        return None
    try:
        before = int(cursor)
    except ValueError:
        raise InvalidInput("not a cursor returned by list", "cursor") from None
    if not 0 <= before <= MAX_CURSOR:
        raise InvalidInput("not a cursor returned by list", "cursor")
    return before


async def list_tasks(
    rt: Runtime,
    *,
    tenant: str | None = None,
    states: tuple[TaskState, ...] = (),
    task_types: tuple[str, ...] = (),
    sources: tuple[str, ...] = (),
    source_id: str | None = None,
    assignee: str | None = None,
    labels: tuple[str, ...] = (),
    agent: str | None = None,
    text: str | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    after: UUID | str | None = None,
) -> TaskPage:
    """Tasks matching every given filter, newest first, ``limit`` per page: ``labels`` are
    all carried by each task; ``created_after`` is inclusive, ``created_before`` exclusive
    (each a datetime or ISO 8601 text, UTC when it names no offset); ``agent``: routed to
    that agent; ``text``: found in the title or source id, whatever its case. ``after``: the tasks
    that come after this task's id in the same order, as its cursor would give (NotFound when
    ``tenant`` has no such task); not with ``cursor``."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"must be 1-{MAX_PAGE}", "limit")
    before = parse_cursor(cursor)
    if after is not None:
        if cursor is not None:
            raise InvalidInput("give a cursor or a task id to list after, not both", "after")
        before = (await get(rt, parse_task_id(after, "after"), tenant)).seq
    after_time = moment(created_after, "created_after")
    before_time = moment(created_before, "created_before")
    if after_time is not None and before_time is not None and after_time >= before_time:
        raise InvalidInput("must be before created_before", "created_after")
    flt = TaskFilter(
        tenant=tenant,
        states=states,
        task_types=task_types,
        sources=sources,
        limit=limit,
        before_seq=before,
        source_id=source_id,
        assignee=assignee,
        labels=labels,
        created_after=after_time,
        created_before=before_time,
        agent=agent or None,
        text=storable_text(text, "text") or None if text else None,
    )
    items = await rt.store.list_tasks(flt)
    next_cursor = str(items[-1].seq) if len(items) == limit else None
    return TaskPage(items, next_cursor)


async def events(rt: Runtime, task_id: UUID, tenant: str | None = None) -> list[Event]:
    """The audit events of one task, oldest first. They outlive the task: a dead letter purged
    by retention (R8) still has its events, the last of them the purge."""
    found = await rt.store.events(task_id, tenant)
    if not found:  # every task has at least its creation event
        raise NotFound(f"no task {task_id}")
    return found


UNSETTLED = (TaskState.PENDING, TaskState.QUEUED, TaskState.EXECUTING, TaskState.RETRYING)


async def work_left(rt: Runtime, tenant: str | None = None) -> int:
    """Tasks the queue will still move by itself: pending, queued, executing and retrying, less
    the pending ones no agent can take (set aside until the configuration changes)."""
    counts = await rt.store.count_by_state(tenant)
    parked = await rt.store.count_parked(rt.clock.now(), tenant)
    return sum(counts.get(state, 0) for state in UNSETTLED) - parked


async def stats(rt: Runtime, tenant: str | None = None) -> Stats:
    """How many tasks are in each state."""
    counts = await rt.store.count_by_state(tenant)
    return Stats({state: counts.get(state, 0) for state in TaskState})


@dataclass(frozen=True)
class AgentLoad:
    """A configured agent, what routing may give it, and its admitted work (queued plus
    executing, over every worker) against its cap."""

    name: str
    task_types: list[str]
    labels: list[str]
    max_concurrent: int
    admitted: int

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentLoad:
        """The load :meth:`to_json` gave."""
        return cls(
            data["name"],
            list(data["task_types"]),
            list(data["labels"]),
            int(data["max_concurrent"]),
            int(data["admitted"]),
        )


async def agent_loads(rt: Runtime) -> list[AgentLoad]:
    """Every configured agent with its load, counted as admission counts it, in configuration
    order (no read when none is configured)."""
    agents = rt.pipelines.context.agents.agents
    if not agents:
        return []
    load = Load.count(await rt.store.active_load())
    return [
        AgentLoad(
            a.name,
            sorted(a.task_types),
            sorted(a.labels),
            a.max_concurrent,
            load.by_agent.get(a.name, 0),
        )
        for a in agents
    ]
