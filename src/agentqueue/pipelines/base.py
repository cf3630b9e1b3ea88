"""The Pipeline protocol (R14): what differs between kinds of work, and nothing else.

Everything a task goes through that is the same for every kind (storage, the state machine,
admission's caps and rate limits, workers, executors) is shared. What differs is asked of the
task's pipeline at four points:

- at submit: what to refuse (:meth:`Pipeline.problems`), whether one submission becomes several
  deliveries (:meth:`Pipeline.expand`, broadcast) and what holds the new task in blocked
  (:meth:`Pipeline.hold_new`);
- when the dependency step releases a task: what holds it next (:meth:`Pipeline.hold_released`);
- at admission: which agent runs it, or why none can (:meth:`Pipeline.route`);
- when an attempt ends: what its timeout means (:meth:`Pipeline.on_timeout`) and whether its
  completion stands (:meth:`Pipeline.on_complete`), decided in the transaction that writes the
  outcome; and what a reply the agent sends while it runs becomes (:meth:`Pipeline.reply`).

The hooks are optional: a kind without them accepts every timeout and completion and takes no
replies (see :class:`agentqueue.pipelines.Pipelines`). Nothing outside this package looks at a
task's kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from ..config import Settings
from ..domain.errors import FieldProblem
from ..domain.guardrails import Guardrail
from ..domain.models import Task
from ..spec import TaskSpec


class Routable(Protocol):
    """What routing reads of a task (a Task, or a pending Candidate)."""

    @property
    def task_type(self) -> str: ...
    @property
    def assignee(self) -> str | None: ...
    @property
    def labels(self) -> tuple[str, ...]: ...


class ThreadReads(Protocol):
    """What the hooks may read, inside the transaction that writes the outcome."""

    async def replies(self, tenant: str, ids: Sequence[UUID]) -> list[Task]:
        """The tasks of ``tenant`` that answer any of ``ids`` (``in_reply_to``), oldest first."""
        ...


@dataclass(frozen=True)
class Verdict:
    """What a kind makes of an attempt's timeout or completion.

    Accepted (the default): the outcome stands as the executor reported it. ``refused``: the
    attempt fails with that reason, retryably (retried, and dead-lettered with the reason once
    its retries are spent). ``completes``: a timeout that completes the task after all, with
    ``result`` (the work was done before the time ran out); ``reason`` goes into its event.
    """

    refused: str | None = None
    completes: bool = False
    result: Any = None
    reason: str = ""

    @classmethod
    def accept(cls) -> Verdict:
        """Let the outcome stand."""
        return _ACCEPT

    @classmethod
    def refuse(cls, reason: str) -> Verdict:
        """A retryable failure saying ``reason``."""
        return cls(refused=reason)

    @classmethod
    def complete(cls, result: Any, reason: str = "") -> Verdict:
        """Complete the task with ``result`` (for a timeout)."""
        return cls(completes=True, result=result, reason=reason)

    @property
    def accepted(self) -> bool:
        """Whether the outcome stands as reported."""
        return self.refused is None and not self.completes


_ACCEPT = Verdict()


@dataclass(frozen=True)
class Hold:
    """Why a task waits in blocked: ``hold`` (``dependencies`` or ``approval``), the reason
    shown, and the guardrail that asked for approval, if one did."""

    hold: str
    reason: str
    rule: str | None = None


@dataclass(frozen=True)
class Route:
    """Where admission may send a task.

    ``agents`` non-empty: one of these (admission takes the least loaded with room);
    ``agents`` None: no agent (any executor serving the task's type, a Python handler);
    ``agents`` empty: nowhere yet, and ``reason`` says why (the task waits in pending).
    """

    agents: tuple[str, ...] | None
    reason: str = ""

    @classmethod
    def to(cls, *agents: str) -> Route:
        """To one of ``agents``."""
        return cls(tuple(agents))

    @classmethod
    def unrouted(cls) -> Route:
        """To whoever serves the task's type (no agent is configured for it)."""
        return UNROUTED

    @classmethod
    def wait(cls, reason: str) -> Route:
        """Nowhere: no eligible agent."""
        return cls((), reason)


UNROUTED = Route(None)
"""The one unrouted route (routes are immutable; admission asks for this one per candidate)."""


@dataclass(frozen=True)
class AgentProfile:
    """An agent as routing sees it: its capabilities and its cap."""

    name: str
    task_types: frozenset[str]
    labels: frozenset[str]
    max_concurrent: int


@dataclass(frozen=True)
class AgentBook:
    """The configured agents, in configuration order."""

    agents: tuple[AgentProfile, ...]
    by_type: Mapping[str, tuple[AgentProfile, ...]] = field(init=False, repr=False, compare=False)
    """The agents that declare each task type, in configuration order (derived from
    ``agents``: admission asks routing once per candidate, and the agents never change)."""

    def __post_init__(self) -> None:
        by_type: dict[str, list[AgentProfile]] = {}
        for agent in self.agents:
            for task_type in agent.task_types:
                by_type.setdefault(task_type, []).append(agent)
        object.__setattr__(self, "by_type", {t: tuple(a) for t, a in by_type.items()})

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentBook:
        """The agents ``settings`` configure."""
        return cls(
            tuple(
                AgentProfile(name, frozenset(a.task_types), frozenset(a.labels), a.max_concurrent)
                for name, a in settings.agents.items()
            )
        )

    @property
    def routing(self) -> bool:
        """Whether there is anyone to route to (no agents: every task is unrouted)."""
        return bool(self.agents)

    def get(self, name: str) -> AgentProfile | None:
        """The agent called ``name``."""
        return next((a for a in self.agents if a.name == name), None)

    def serving(self, task_type: str) -> list[AgentProfile]:
        """Agents that declare ``task_type``."""
        return list(self.by_type.get(task_type, ()))

    def capable(self, task_type: str, labels: Sequence[str]) -> list[AgentProfile]:
        """Agents that declare ``task_type`` and every one of ``labels``."""
        serving = self.by_type.get(task_type, ())
        if not labels:
            return list(serving)
        return [a for a in serving if a.labels.issuperset(labels)]

    def named(self, task: Routable, role: str) -> Route:
        """To the agent ``task.assignee`` names (its ``role``: assignee, recipient), if it is
        configured and takes the task's type and labels; else wait, saying why."""
        name = task.assignee
        agent = self.get(name) if name is not None else None
        if agent is None:
            return Route.wait(f"{role} {name!r} is not a configured agent")
        if task.task_type not in agent.task_types:
            return Route.wait(f"{role} {name!r} does not take task type {task.task_type!r}")
        missing = [label for label in task.labels if label not in agent.labels]
        if missing:
            return Route.wait(f"{role} {name!r} lacks the labels {', '.join(missing)}")
        return Route.to(agent.name)


@dataclass(frozen=True)
class PipelineContext:
    """What a pipeline is built from: the settings, the agents and the guardrails."""

    settings: Settings
    agents: AgentBook
    guardrails: tuple[Guardrail, ...]


class Pipeline(Protocol):
    """The path of one kind of work. Implementations are registered with
    :func:`agentqueue.pipelines.register_kind`."""

    kind: str
    guarded: bool
    """Whether it consults the guardrails (a rule may name only such kinds in applies_to)."""

    def accepts(self, spec: TaskSpec) -> bool:
        """Whether a submission that names no kind is of this kind."""
        ...

    def problems(self, spec: TaskSpec, field: Callable[[str], str]) -> list[FieldProblem]:
        """What this kind refuses in ``spec`` (``field`` gives a field's name as the caller
        sees it)."""
        ...

    def expand(self, spec: TaskSpec) -> list[TaskSpec]:
        """The tasks one submission becomes (itself, unless it is broadcast)."""
        ...

    def hold_new(self, task: Task) -> Hold | None:
        """What holds a new task in blocked, if anything."""
        ...

    def hold_released(self, task: Task) -> Hold | None:
        """What holds a task its dependencies just released, if anything."""
        ...

    def route(self, task: Routable) -> Route:
        """Where admission may send the task."""
        ...


class PipelineHooks(Protocol):
    """The optional hooks of a :class:`Pipeline`: a kind may define any of them, and one
    without them accepts every outcome and takes no replies (the registry asks for each by
    name)."""

    checks_completion: bool
    """Whether :meth:`on_complete` may refuse a completion. False lets the execution layer
    write this kind's completions set-wise, without asking."""

    async def on_timeout(self, task: Task, reads: ThreadReads) -> Verdict:
        """What an attempt of ``task`` that ran out of time means: accept (it fails, retryably,
        as any timeout), refuse with another reason, or complete the task after all."""
        ...

    async def on_complete(self, task: Task, result: Any, reads: ThreadReads) -> Verdict:
        """Whether an attempt's completion with ``result`` stands: accept, or refuse with a
        reason (a retryable failure)."""
        ...

    def reply(self, task: Task, body: Any) -> dict[str, Any]:
        """The submission a ``{"reply": body}`` line of ``task``'s agent becomes (fields of a
        task spec); InvalidInput naming the field if ``body`` is not one, or if the kind takes
        no replies."""
        ...
