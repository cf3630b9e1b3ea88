"""A third kind of work, registered from outside agentqueue to show that a kind is a module
and a line of configuration: sign-offs always wait for a person's approval and then go to the
agent named ``signer``, whatever their type."""

from __future__ import annotations

from collections.abc import Callable

from agentqueue.domain.errors import FieldProblem
from agentqueue.domain.models import Task
from agentqueue.domain.states import HOLD_APPROVAL
from agentqueue.pipelines import Hold, PipelineContext, Routable, Route, register_kind
from agentqueue.spec import TaskSpec


@register_kind("signoff")
class SignoffPipeline:
    """Sign-offs: held for approval, then to the signer."""

    kind = "signoff"
    guarded = False

    def __init__(self, ctx: PipelineContext) -> None:
        self.ctx = ctx

    def accepts(self, spec: TaskSpec) -> bool:
        """Manual work of type ``signoff``."""
        return spec.source == "manual" and spec.task_type == "signoff"

    def problems(self, spec: TaskSpec, field: Callable[[str], str]) -> list[FieldProblem]:
        """A sign-off cannot name who signs."""
        if spec.assignee is not None:
            return [FieldProblem(field("assignee"), "a sign-off goes to the signer")]
        return []

    def expand(self, spec: TaskSpec) -> list[TaskSpec]:
        """One task."""
        return [spec]

    def hold_new(self, task: Task) -> Hold | None:
        """Always a person first."""
        return Hold(HOLD_APPROVAL, "a sign-off waits for a person", "signoff")

    def hold_released(self, task: Task) -> Hold | None:
        """Nothing after."""
        return None

    def route(self, task: Routable) -> Route:
        """The signer."""
        return Route.to("signer")
