"""A third kind of work with hooks of its own, registered from outside agentqueue (named in
``[pipelines] modules``): its completions stand only when the result says ``signed``, and an
attempt that runs out of time counts as done (``{"late": true}``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentqueue.domain.errors import FieldProblem
from agentqueue.domain.models import Task
from agentqueue.pipelines import (
    Hold,
    PipelineContext,
    Routable,
    Route,
    ThreadReads,
    Verdict,
    register_kind,
)
from agentqueue.spec import TaskSpec


@register_kind("hooked")
class HookedPipeline:
    """Work that must be signed, and that is done when its time runs out."""

    kind = "hooked"
    guarded = False
    # Neither ``checks_completion`` (it has ``on_complete``) nor ``reply`` (it sends none): a
    # kind leaves out what it does not use.

    def __init__(self, ctx: PipelineContext) -> None:
        self.ctx = ctx

    def accepts(self, spec: TaskSpec) -> bool:
        """Only when named."""
        return False

    def problems(self, spec: TaskSpec, field: Callable[[str], str]) -> list[FieldProblem]:
        """Nothing."""
        return []

    def expand(self, spec: TaskSpec) -> list[TaskSpec]:
        """One task."""
        return [spec]

    def hold_new(self, task: Task) -> Hold | None:
        """Never held."""
        return None

    def hold_released(self, task: Task) -> Hold | None:
        """Never held."""
        return None

    def route(self, task: Routable) -> Route:
        """The agent that serves it."""
        return Route.to("carol")

    async def on_timeout(self, task: Task, reads: ThreadReads) -> Verdict:
        """Out of time is done."""
        return Verdict.complete({"late": True}, "ran out of time, which is fine for this kind")

    async def on_complete(self, task: Task, result: Any, reads: ThreadReads) -> Verdict:
        """Signed, or refused."""
        if isinstance(result, dict) and result.get("signed") is True:
            return Verdict.accept()
        return Verdict.refuse("not signed")
