"""The mail pipeline: point to point, straight to the recipient.

Mail is agents talking to each other. It is never held (no guardrails, no dependencies), never
routed by capability and never broadcast: its assignee is the recipient, set at submit and never
cleared, and admission sends it to that agent alone, or leaves it pending saying why.

A mail is answered by a reply: a mail from its recipient back to its sender (``requested_by``)
with ``in_reply_to`` naming it, submitted like any mail or printed by the recipient's agent as a
``{"reply": {...}}`` line (recorded at once). A mail whose attempt times out after its reply was
sent is completed, not run again; a completion whose result claims a reply (``reply_id``,
``reply_to``) that does not exist is refused ("no such reply"): an agent that only says it
answered is retried, then dead-lettered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..domain.errors import FieldProblem, InvalidInput
from ..domain.models import Task
from ..spec import TaskSpec
from .base import Hold, PipelineContext, Routable, Route, ThreadReads, Verdict

NO_SUCH_REPLY = "no such reply"
REPLY_FIELDS = ("title", "payload")
"""What a reply line may set; everything else of the reply follows from the mail it answers."""
_CLAIMS = ("reply_id", "reply_to")


class MailPipeline:
    """Mail between agents (source ``mail``)."""

    kind = "mail"
    guarded = False
    checks_completion = True

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

    async def on_timeout(self, task: Task, reads: ThreadReads) -> Verdict:
        """Look for the reply first: if the recipient already answered, the mail is done (it is
        neither run nor answered a second time); else a timeout as any."""
        replies = await _replies(task, reads)
        if replies:
            reply = replies[0]
            return Verdict.complete(
                {"reply_id": str(reply.id)}, f"timed out after its reply {reply.id} was sent"
            )
        return Verdict.accept()

    async def on_complete(self, task: Task, result: Any, reads: ThreadReads) -> Verdict:
        """A result that claims a reply (``reply_id``: that reply; ``reply_to``: a reply to this
        mail) stands only if the reply exists, from the recipient, answering this mail."""
        claim = claimed_reply(result)
        if claim is None:
            return Verdict.accept()
        field, value = claim
        replies = await _replies(task, reads)
        if field == "reply_id":
            if not any(str(r.id) == str(value).strip().lower() for r in replies):
                return Verdict.refuse(f"{NO_SUCH_REPLY}: reply_id {_excerpt(value)}")
            return Verdict.accept()
        if not isinstance(value, bool) and str(value).strip().lower() != str(task.id):
            return Verdict.refuse(
                f"{NO_SUCH_REPLY}: reply_to names {_excerpt(value)}, not this mail {task.id}"
            )
        if not replies:
            return Verdict.refuse(f"{NO_SUCH_REPLY}: no reply to {task.id} was sent")
        return Verdict.accept()

    def reply(self, task: Task, body: Any) -> dict[str, Any]:
        """The reply mail: from the recipient back to the sender, answering ``task``; at most
        one per mail (its idempotency key), however often the agent runs or prints it."""
        if not isinstance(body, Mapping):
            raise InvalidInput(f"must be an object with {', '.join(REPLY_FIELDS)}", "reply")
        for key in body:
            if key not in REPLY_FIELDS:
                raise InvalidInput(
                    f"unknown field (known: {', '.join(REPLY_FIELDS)})", f"reply.{str(key)[:64]}"
                )
        title = body.get("title")
        if title is None:
            title = f"Re: {task.title}"[:256]
        return {
            "title": title,
            "task_type": task.task_type,
            "payload": body.get("payload", {}),
            "priority": task.priority,
            "tenant": task.tenant,
            "source": "mail",
            "kind": self.kind,
            "assignee": task.requested_by,
            "requested_by": task.assignee,
            "in_reply_to": str(task.id),
            "idempotency_key": f"reply:{task.id}",
        }


def claimed_reply(result: Any) -> tuple[str, Any] | None:
    """The reply a result claims, as (field, value): ``reply_id`` or ``reply_to`` at the top of
    the result object, or of its ``result`` member (``{"result": {"reply_id": ...}}``)."""
    for where in (result, result.get("result") if isinstance(result, Mapping) else None):
        if isinstance(where, Mapping):
            for field in _CLAIMS:
                if where.get(field) not in (None, False, ""):
                    return field, where[field]
    return None


async def _replies(task: Task, reads: ThreadReads) -> list[Task]:
    """The replies to ``task`` from its recipient."""
    return [
        r for r in await reads.replies(task.tenant, [task.id]) if r.requested_by == task.assignee
    ]


def _excerpt(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:80] + "…"
