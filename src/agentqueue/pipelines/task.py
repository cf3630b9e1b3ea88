"""The task pipeline: dependencies -> guardrails -> routing -> dispatch.

Routing: an explicit assignee goes to that agent (if it takes the task's type and labels);
otherwise to the least-loaded agent whose
capabilities (task types, labels) match; a type no agent declares is left to whoever serves it
(Python handlers). A task is never broadcast unless its type says ``broadcast = N``, and then
to at most N capable agents, one task each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.errors import FieldProblem, InvalidInput
from ..domain.guardrails import first_match
from ..domain.models import Task
from ..domain.states import HOLD_APPROVAL, HOLD_DEPENDENCIES
from ..spec import TaskSpec
from .base import Hold, PipelineContext, Routable, Route


class TaskPipeline:
    """Ordinary work: issues, pull requests, API calls, cron."""

    kind = "task"
    guarded = True

    def __init__(self, ctx: PipelineContext) -> None:
        self.ctx = ctx

    def accepts(self, spec: TaskSpec) -> bool:
        """The default kind: everything no other kind takes."""
        return True

    def problems(self, spec: TaskSpec, field: Callable[[str], str]) -> list[FieldProblem]:
        """Nothing beyond the common rules; a task answers no mail."""
        if spec.in_reply_to is not None:
            return [FieldProblem(field("in_reply_to"), "only mail answers mail")]
        return []

    def expand(self, spec: TaskSpec) -> list[TaskSpec]:
        """A task of a broadcast type that names no assignee goes to at most ``broadcast``
        capable agents, one task each (the first keeps the submission's identity)."""
        settings = self.ctx.settings.task_types.get(spec.task_type)
        if settings is None or not settings.broadcast or spec.assignee is not None:
            return [spec]
        agents = self.ctx.agents.capable(spec.task_type, spec.labels)[: settings.broadcast]
        if not agents:
            return [spec]  # waits in pending with the reason, like any unroutable task
        first, *rest = agents
        copies = [spec.model_copy(update={"assignee": first.name})]
        for agent in rest:
            copies.append(
                spec.model_copy(
                    update={
                        "id": None,
                        "assignee": agent.name,
                        "depends_on": spec.depends_on,
                        "idempotency_key": (
                            f"{spec.idempotency_key}@{agent.name}" if spec.idempotency_key else None
                        ),
                        "source_id": f"{spec.source_id}@{agent.name}" if spec.source_id else None,
                    }
                )
            )
        return copies

    def hold_new(self, task: Task) -> Hold | None:
        """Dependencies first; a task with none (or once they completed) meets the guardrails."""
        if task.depends_on:
            n = len(task.depends_on)
            return Hold(
                HOLD_DEPENDENCIES, f"waiting for {n} {'dependency' if n == 1 else 'dependencies'}"
            )
        return self.hold_released(task)

    def hold_released(self, task: Task) -> Hold | None:
        """The first guardrail that matches holds the task for approval."""
        found = first_match(
            self.ctx.guardrails,
            kind=task.kind,
            task_type=task.task_type,
            priority=task.priority,
            title=task.title,
            payload=task.payload,
        )
        if found is None:
            return None
        return Hold(HOLD_APPROVAL, found.reason, found.rule.name)

    def route(self, task: Routable) -> Route:
        """Explicit assignee, else the capable agents, else handlers, else wait with why."""
        book = self.ctx.agents
        if not book.routing:
            return Route.unrouted()
        if task.assignee is not None:
            return book.named(task, "assignee")
        capable = book.capable(task.task_type, task.labels)
        if capable:
            return Route.to(*(a.name for a in capable))
        serving = book.serving(task.task_type)
        if not serving and not task.labels:
            return Route.unrouted()
        labels = ", ".join(task.labels)
        if not serving:
            return Route.wait(
                f"no agent can do it: none declares task type {task.task_type!r} (labels {labels})"
            )
        return Route.wait(
            f"no agent can do it: no agent declaring task type {task.task_type!r} has "
            f"every label of {labels}"
        )

    # No on_timeout or on_complete: a timeout is a retryable failure, as any, and every
    # completion stands (so completions are written set-wise, without asking).

    def reply(self, task: Task, body: Any) -> dict[str, Any]:
        """A task takes no replies."""
        raise InvalidInput("a task sends no replies (only mail does)", "reply")
