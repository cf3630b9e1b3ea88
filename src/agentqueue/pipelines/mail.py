"""The mail pipeline: point to point, straight to the recipient.

Mail is agents talking to each other. It is never held (no guardrails, no dependencies), never
routed by capability and never broadcast: its assignee is the recipient, set at submit and never
cleared, and admission sends it to that agent alone, or leaves it pending saying why.
"""

from __future__ import annotations

from collections.abc import Callable

from ..domain.errors import FieldProblem
from ..domain.models import Task
from ..spec import TaskSpec
from .base import Hold, PipelineContext, Routable, Route


class MailPipeline:
    """Mail between agents (source ``mail``)."""

    kind = "mail"
    guarded = False

    def __init__(self, ctx: PipelineContext) -> None:
        self.ctx = ctx

    def accepts(self, spec: TaskSpec) -> bool:
        """Everything that comes from mail."""
        return spec.source == "mail"

    def problems(self, spec: TaskSpec, field: Callable[[str], str]) -> list[FieldProblem]:
        """Mail needs its recipient and cannot wait on other tasks."""
        found = []
        if spec.assignee is None:
            found.append(FieldProblem(field("assignee"), "mail needs its recipient"))
        if spec.depends_on:
            found.append(FieldProblem(field("depends_on"), "mail cannot depend on tasks"))
        return found

    def expand(self, spec: TaskSpec) -> list[TaskSpec]:
        """One mail, one recipient."""
        return [spec]

    def hold_new(self, task: Task) -> Hold | None:
        """Never held: no guardrails, no dependencies (the seed's Bug-C)."""
        return None

    def hold_released(self, task: Task) -> Hold | None:
        """Never held."""
        return None

    def route(self, task: Routable) -> Route:
        """The recipient, and nobody else (the seed's broadcast)."""
        if not self.ctx.agents.routing:
            return Route.unrouted()
        return self.ctx.agents.named(task, "recipient")
