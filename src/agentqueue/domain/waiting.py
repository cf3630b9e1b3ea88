"""Why a task waits: a pure function from facts read once to a list of reasons.

``show ID``, ``GET /v1/tasks/{id}`` (its ``waiting`` field) and the exit report of
``worker --until-idle`` / ``serve --until-idle`` all ask :func:`why_waiting`; the last asks it
for a process (a :class:`Scope`: the task types, agents and tools that process runs), and
:func:`survey` tells from the answers whether anything left is still work for that process.

Each :class:`Reason` says whether it ``moves`` (the task goes on without anyone acting: a retry's
backoff ends, an agent's slot frees up, a dependency completes) and whether it ``keeps`` an
``--until-idle`` process waiting (work that process will run, or that is on its way to it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from .models import Task
from .task_state import TaskState

S = TaskState

WAITING_STATES = frozenset(
    {S.PENDING, S.BLOCKED, S.QUEUED, S.RETRYING, S.WAITING_TOOL, S.EXECUTING}
)
"""States in which a task is on its way somewhere (the ones a reason is given for)."""

ENDED_BADLY = frozenset({S.FAILED, S.CANCELLED, S.DEAD_LETTER, S.MANUAL_REVIEW, S.ARCHIVED})
"""A dependency in one of these will never complete: its dependents are cancelled (R13)."""

MAX_DEPTH = 20
"""How deep a chain of dependencies is followed (deeper ones are taken to move)."""

RouteAnswer = tuple[tuple[str, ...] | None, str]
"""What routing says of a task: the agents that may take it (None: no agent, whoever serves
its type; empty: nobody) and, when nobody, why."""


@dataclass(frozen=True)
class Reason:
    """One reason a task waits. ``code`` is stable (for scripts); ``text`` is for people."""

    code: str
    text: str
    moves: bool
    """The task goes on without anyone acting (no approval, resume or configuration change)."""
    keeps: bool = True
    """An ``--until-idle`` process keeps running for it (only meaningful with a Scope)."""

    def to_json(self) -> dict[str, Any]:
        """``{"code", "text", "moves"}``."""
        return {"code": self.code, "text": self.text, "moves": self.moves}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reason:
        """The reason :meth:`to_json` gave."""
        return cls(str(data["code"]), str(data["text"]), bool(data["moves"]))


@dataclass(frozen=True)
class Scope:
    """A process that asks what is left for it: the executors it runs, as (task types,
    agents) pairs (no agents: Python handlers, which take a type whichever agent), the tools
    it answers, and the task types its options left out (``--task-types``, ``--agent``)."""

    worker: str
    serves: tuple[tuple[frozenset[str], frozenset[str]], ...]
    tools: frozenset[str] = frozenset()
    left_out: frozenset[str] = frozenset()

    def takes(self, task_type: str, agents: tuple[str, ...] | None) -> bool:
        """Whether one of its executors claims a task of ``task_type`` routed to one of
        ``agents`` (None: to no agent)."""
        for types, names in self.serves:
            if task_type not in types:
                continue
            if not names or agents is None or any(a in names for a in agents):
                return True
        return False

    def serves_type(self, task_type: str) -> bool:
        """Whether any of its executors runs ``task_type``."""
        return any(task_type in types for types, _ in self.serves)


def _no_route(task: Task) -> RouteAnswer:
    return (None, "")


@dataclass(frozen=True)
class Facts:
    """What the reasons are worked out from, read once.

    ``agent_caps`` and ``agent_load``: each configured agent's cap and admitted work (queued
    and executing); ``max_active`` and ``active``: the global cap and the admitted work;
    ``dependencies``: the tasks depended on, by id (one missing was not read: taken to move);
    ``route``: the task's pipeline routing it."""

    now: datetime
    paused: frozenset[str] = frozenset()
    agent_caps: Mapping[str, int] = field(default_factory=dict)
    agent_load: Mapping[str, int] = field(default_factory=dict)
    max_active: int | None = None
    active: int = 0
    claims_admit: bool = False
    """Under a global cap alone workers' claims admit, not the scheduler."""
    dependencies: Mapping[UUID, Task] = field(default_factory=dict)
    route: Callable[[Task], RouteAnswer] = _no_route
    scope: Scope | None = None


def short(task_id: UUID) -> str:
    """The first block of an id, as people quote it."""
    return str(task_id)[:8]


def _iso(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds") if at is not None else "?"


def reads_facts(task: Task) -> bool:
    """Whether the reasons for ``task`` draw on :class:`Facts` beyond the time and the scope
    (:func:`why_waiting`): an executing task's, a task's waiting on a tool and one held for
    approval do not, nor does an ended task (it has none)."""
    state = task.state
    if state not in WAITING_STATES or state in (S.EXECUTING, S.WAITING_TOOL):
        return False
    return not (state is S.BLOCKED and task.hold == "approval")


def reads_load(task: Task, max_active: int | None, agents: tuple[str, ...] | None) -> bool:
    """Whether the reasons for ``task`` draw on the admitted work (``agent_load`` and
    ``active``), under a global cap of ``max_active`` (None: none) when its routing answers
    ``agents`` (Facts.route): a pending or retrying task's, when there is a global cap or it
    is routed to agents (their caps). A queued task's do not (it has been admitted), nor a
    blocked one's: a dependency at a cap still moves, and only the reasons of one that cannot
    are told."""
    if task.state not in (S.PENDING, S.RETRYING) or not reads_facts(task):
        return False
    return max_active is not None or bool(agents)


def why_waiting(task: Task, facts: Facts, depth: int = 0) -> list[Reason]:
    """Why ``task`` has not run (or ended) yet, most telling first; empty for a task in none
    of :data:`WAITING_STATES`."""
    state = task.state
    if state not in WAITING_STATES:
        return []
    scope = facts.scope
    if state is S.EXECUTING:
        return [_executing(task, scope)]
    if state is S.WAITING_TOOL:
        return [_tool(task, scope)]
    if state is S.BLOCKED and task.hold == "approval":
        reason = task.state_reason or "a guardrail asks for approval"
        return [
            Reason(
                "approval",
                f"held for approval ({reason}): `agentqueue approve {task.id}`",
                moves=False,
                keeps=False,
            )
        ]
    reasons: list[Reason] = []
    if task.task_type in facts.paused:
        reasons.append(
            Reason(
                "paused",
                f"task type {task.task_type!r} is paused: `agentqueue resume {task.task_type}`",
                moves=False,
                keeps=False,
            )
        )
    if state is S.BLOCKED:
        if task.hold == "dependencies":
            reasons.extend(_dependencies(task, facts, depth))
        else:
            reasons.append(
                Reason("blocked", f"blocked: {task.state_reason or task.hold}", False, False)
            )
        return _with_scope(task, facts, reasons, None)
    if state is S.QUEUED:
        owner = (task.agent,) if task.agent else None
        whom = f"agent {task.agent}" if task.agent else f"a worker serving {task.task_type!r}"
        reasons.append(Reason("claim", f"queued: waits to be claimed by {whom}", True))
        return _with_scope(task, facts, reasons, owner)
    # pending or retrying: admission (and routing) still ahead
    agents, why_not = facts.route(task)
    if state is S.RETRYING:
        due = task.run_after
        when = f"due {_iso(due)}" if due is not None and due > facts.now else "due now"
        reasons.append(
            Reason(
                "backoff",
                f"retry {task.retry_count} of {task.max_retries} after backoff, {when}",
                True,
            )
        )
    elif task.run_after is not None and task.run_after > facts.now:
        reasons.append(
            Reason(
                "scheduled",
                f"not before {_iso(task.run_after)} (run_after)",
                moves=True,
                keeps=False,
            )
        )
    if agents is not None and not agents:
        reasons.append(Reason("no_agent", why_not or "no agent can do it", False, False))
        return _with_scope(task, facts, reasons, agents)
    if agents:
        full = [a for a in agents if facts.agent_load.get(a, 0) >= facts.agent_caps.get(a, 1)]
        if len(full) == len(agents):
            shown = ", ".join(
                f"{a} ({facts.agent_load.get(a, 0)}/{facts.agent_caps.get(a, 1)})" for a in full
            )
            plural = "s" if len(full) > 1 else ""
            reasons.append(
                Reason("agent_cap", f"agent{plural} {shown} at the cap: waits for a slot", True)
            )
    if facts.max_active is not None and facts.active >= facts.max_active:
        reasons.append(
            Reason(
                "global_cap",
                f"the global cap is reached ({facts.active}/{facts.max_active} admitted)",
                True,
            )
        )
    if state is S.PENDING and len(reasons) == 0:
        who = "a worker's claim" if facts.claims_admit else "the scheduler"
        reasons.append(Reason("admission", f"waits for {who} to admit it", True))
    return _with_scope(task, facts, reasons, agents)


def _executing(task: Task, scope: Scope | None) -> Reason:
    since = f" since {_iso(task.started_at)}" if task.started_at else ""
    if scope is not None and task.assigned_to == scope.worker:
        return Reason("executing", f"executing in this process{since}", True)
    # A task of a type this process runs may come back to it as a retry.
    keeps = scope is None or scope.serves_type(task.task_type)
    return Reason("executing", f"executing in {task.assigned_to or '?'}{since}", True, keeps)


def _tool(task: Task, scope: Scope | None) -> Reason:
    awaited = [c for c in task.tool_calls if isinstance(c, Mapping) and c.get("state") == "waiting"]
    call = awaited[-1] if awaited else {}
    name = str(call.get("name", "?"))
    text = (
        f"waits for the result of tool {name} (call {call.get('id', '?')}), "
        f"times out at {_iso(task.tool_deadline_at)}"
    )
    keeps = scope is None or scope.serves_type(task.task_type) or name in scope.tools
    return Reason("tool", text, True, keeps)


def _dependencies(task: Task, facts: Facts, depth: int) -> list[Reason]:
    waiting: list[str] = []
    for dep_id in task.depends_on:
        dep = facts.dependencies.get(dep_id)
        if dep is None:  # not read: taken to move
            waiting.append(short(dep_id))
            continue
        if dep.state is S.COMPLETED:
            continue
        if dep.state in ENDED_BADLY:
            return [
                Reason(
                    "dependency_failed",
                    f"dependency {short(dep_id)} ended {dep.state.value}: "
                    "the scheduler cancels this task",
                    moves=False,
                    keeps=False,
                )
            ]
        if depth < MAX_DEPTH and not _progresses(dep, facts, depth + 1):
            stuck = next(r for r in _blocking(dep, facts, depth + 1))
            return [
                Reason(
                    "dependency_stuck",
                    f"dependency {short(dep_id)} ({dep.state.value}) cannot go on: {stuck.text}",
                    moves=False,
                    keeps=False,
                )
            ]
        waiting.append(f"{short(dep_id)} ({dep.state.value})")
    n = len(task.depends_on)
    if not waiting:
        text = "its dependencies completed: the scheduler releases it"
    else:
        text = f"waits for {len(waiting)} of {n} dependencies: {', '.join(waiting)}"
    return [Reason("dependencies", text, True)]


def _blocking(task: Task, facts: Facts, depth: int) -> Iterable[Reason]:
    """The reasons that stop ``task`` (as a dependency) from going on."""
    reasons = why_waiting(task, facts, depth)
    test = _keeps if facts.scope is not None else _moves
    return [r for r in reasons if not test(r)] or reasons


def _moves(r: Reason) -> bool:
    return r.moves


def _keeps(r: Reason) -> bool:
    return r.moves and r.keeps


def _progresses(dep: Task, facts: Facts, depth: int) -> bool:
    """Whether a dependency will complete as far as can be seen: it is executing, or every
    reason it waits moves (for a process: and is work of that process)."""
    if dep.state is S.EXECUTING:
        return True
    test = _keeps if facts.scope is not None else _moves
    return all(test(r) for r in why_waiting(dep, facts, depth))


def _with_scope(
    task: Task, facts: Facts, reasons: list[Reason], agents: tuple[str, ...] | None
) -> list[Reason]:
    """Add, for a process, that it does not run the task (put first: it is what it can act
    on)."""
    scope = facts.scope
    if scope is None or scope.takes(task.task_type, agents if agents else None):
        return reasons
    if task.task_type in scope.left_out:
        text = f"task type {task.task_type!r} is left out of this process by its options"
    elif scope.serves_type(task.task_type) and agents:
        text = f"routed to {', '.join(agents)}, which this process does not run"
    else:
        text = f"no handler or agent in this process takes task type {task.task_type!r}"
    return [Reason("not_served", text, moves=False, keeps=False), *reasons]


def keeps(reasons: Iterable[Reason]) -> bool:
    """Whether a task with these reasons keeps an ``--until-idle`` process running."""
    found = list(reasons)
    return bool(found) and all(r.moves and r.keeps for r in found)


def headline(reasons: list[Reason]) -> Reason:
    """The reason to report a task under: the first that stops it."""
    return next((r for r in reasons if not (r.moves and r.keeps)), reasons[0])


PER_TASK = {
    "approval": "held for approval",
    "dependency_failed": "a dependency ended badly: the scheduler cancels them",
    "dependency_stuck": "a dependency cannot go on",
    "scheduled": "not before their run_after",
    "tool": "waiting on a tool call this process does not run",
    "executing": "executing in another process",
    "blocked": "blocked",
}
"""Codes whose text names one task: reported under one line per code."""


@dataclass
class Left:
    """Tasks left for one reason: how many, and a few of their ids."""

    code: str
    text: str
    count: int = 0
    ids: list[UUID] = field(default_factory=list)


@dataclass
class Survey:
    """What is left for a process: ``kept`` tasks it still waits for, the others by reason."""

    kept: int = 0
    left: dict[tuple[str, str], Left] = field(default_factory=dict)
    samples: int = 3

    def add(self, task: Task, reasons: list[Reason]) -> None:
        """Count one task."""
        if keeps(reasons):
            self.kept += 1
            return
        top = headline(reasons) if reasons else Reason("unknown", task.state.value, False, False)
        text = PER_TASK.get(top.code, top.text)
        entry = self.left.setdefault((top.code, text), Left(top.code, text))
        entry.count += 1
        if len(entry.ids) < self.samples:
            entry.ids.append(task.id)

    @property
    def total_left(self) -> int:
        """Tasks left that the process does not wait for."""
        return sum(e.count for e in self.left.values())

    def lines(self) -> list[str]:
        """One line per reason, most tasks first: ``count  code: text (e.g. ids)``."""
        out = []
        for entry in sorted(self.left.values(), key=lambda e: (-e.count, e.code, e.text)):
            ids = ", ".join(str(i) for i in entry.ids)
            more = ", ..." if entry.count > len(entry.ids) else ""
            out.append(f"{entry.count:>6}  {entry.code}: {entry.text} (e.g. {ids}{more})")
        return out


def survey(tasks: Iterable[Task], facts: Facts, into: Survey | None = None) -> Survey:
    """Count ``tasks`` for the process ``facts.scope`` names: kept, or left with a reason."""
    result = into if into is not None else Survey()
    for task in tasks:
        result.add(task, why_waiting(task, facts))
    return result
