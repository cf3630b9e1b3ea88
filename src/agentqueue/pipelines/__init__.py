"""Pipelines per kind of work (R14): ``task`` and ``mail`` built in, more registered by modules
named in ``[pipelines] modules``.

A kind is added by a module that defines a class following :class:`Pipeline` (built from a
:class:`PipelineContext`), with any of the optional hooks of :class:`PipelineHooks`, and
registers it::

    from agentqueue.pipelines import register_kind

    @register_kind("review")
    class ReviewPipeline: ...

and by naming that module in the configuration. Nothing outside this package branches on kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from ..config import Settings
from ..domain.errors import ConfigError, InvalidInput
from ..domain.guardrails import Guardrail
from ..domain.models import Task
from ..spec import TaskSpec
from .base import (
    AgentBook,
    AgentProfile,
    Hold,
    Pipeline,
    PipelineContext,
    PipelineHooks,
    Routable,
    Route,
    ThreadReads,
    Verdict,
)
from .mail import MailPipeline
from .task import TaskPipeline

__all__ = [
    "AgentBook",
    "AgentProfile",
    "Hold",
    "Pipeline",
    "PipelineContext",
    "PipelineHooks",
    "Pipelines",
    "Routable",
    "Route",
    "ThreadReads",
    "Verdict",
    "register_kind",
]

DEFAULT_KIND = "task"

Factory = Callable[[PipelineContext], Pipeline]
_KINDS: dict[str, Factory] = {}
F = TypeVar("F", bound=Factory)


def register_kind(kind: str) -> Callable[[F], F]:
    """Register the pipeline class (or factory) of ``kind``; a later registration replaces an
    earlier one of the same kind."""

    def register(factory: F) -> F:
        _KINDS[kind] = factory
        return factory

    return register


register_kind("task")(TaskPipeline)
register_kind("mail")(MailPipeline)


class Pipelines:
    """The pipelines of every registered kind, built for one configuration."""

    def __init__(self, settings: Settings) -> None:
        for module in settings.pipelines.modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(f"cannot import {module!r}: {exc}", "pipelines.modules") from None
        ctx = PipelineContext(
            settings,
            AgentBook.from_settings(settings),
            tuple(
                Guardrail.compile(
                    g.name, g.pattern, g.applies_to, g.task_types, g.priorities, g.approvers
                )
                for g in settings.guardrails
            ),
        )
        self.context = ctx
        self.by_kind: dict[str, Pipeline] = {kind: make(ctx) for kind, make in _KINDS.items()}
        for index, rule in enumerate(settings.guardrails):
            for kind in rule.applies_to:
                pipeline = self.by_kind.get(kind)
                where = f"guardrails.{index}.applies_to"
                if pipeline is None:
                    raise ConfigError(f"no kind {kind!r} is registered", where)
                if not pipeline.guarded:
                    raise ConfigError(f"the {kind} pipeline never consults guardrails", where)

    def for_spec(self, spec: TaskSpec) -> Pipeline | None:
        """The pipeline a submission goes through: the kind it names (None if no such kind is
        registered), else the first other kind that accepts it, else ``task``."""
        if spec.kind is not None:
            return self.by_kind.get(spec.kind)
        for kind, pipeline in self.by_kind.items():
            if kind != DEFAULT_KIND and pipeline.accepts(spec):
                return pipeline
        return self.by_kind[DEFAULT_KIND]

    def get(self, kind: str) -> Pipeline | None:
        """The pipeline of a stored task's kind (None if that kind is not registered here)."""
        return self.by_kind.get(kind)

    def route(self, kind: str, task: Routable) -> Route:
        """Where admission may send a task of ``kind``."""
        pipeline = self.by_kind.get(kind)
        if pipeline is None:
            return Route.wait(f"no pipeline for kind {kind!r} is registered")
        return pipeline.route(task)

    def approvers(self, rule: str | None) -> frozenset[str]:
        """Who may approve work held by ``rule`` (the rule's own list, else everyone in
        ``[approval] approvers``)."""
        for guardrail in self.context.guardrails:
            if guardrail.name == rule and guardrail.approvers is not None:
                return guardrail.approvers
        return frozenset(self.context.settings.approval.approvers)

    def rule_approvers(self, rule: str | None) -> frozenset[str] | None:
        """The approvers guardrail ``rule`` names itself, or None if it names none."""
        for guardrail in self.context.guardrails:
            if guardrail.name == rule and guardrail.approvers is not None:
                return guardrail.approvers
        return None

    # --- the hooks, as the shared execution layer calls them (a kind may leave them out) -----

    def checks_completion(self, kind: str) -> bool:
        """Whether completions of ``kind`` must be put to its pipeline's ``on_complete``."""
        pipeline = self.by_kind.get(kind)
        if pipeline is None:
            return False
        return bool(getattr(pipeline, "checks_completion", hasattr(pipeline, "on_complete")))

    async def on_timeout(self, task: Task, reads: ThreadReads) -> Verdict:
        """What ``task``'s kind makes of its attempt's timeout (accepted by default)."""
        hook = getattr(self.by_kind.get(task.kind), "on_timeout", None)
        return Verdict.accept() if hook is None else await hook(task, reads)

    async def on_complete(self, task: Task, result: Any, reads: ThreadReads) -> Verdict:
        """Whether ``task``'s kind lets its completion stand (accepted by default)."""
        hook = getattr(self.by_kind.get(task.kind), "on_complete", None)
        return Verdict.accept() if hook is None else await hook(task, result, reads)

    def reply(self, task: Task, body: Any) -> dict[str, Any]:
        """The submission a reply line of ``task``'s agent becomes; InvalidInput if its kind
        takes none or ``body`` is not one."""
        hook = getattr(self.by_kind.get(task.kind), "reply", None)
        if hook is None:
            raise InvalidInput(f"a task of kind {task.kind!r} sends no replies", "reply")
        result: dict[str, Any] = hook(task, body)
        return result
