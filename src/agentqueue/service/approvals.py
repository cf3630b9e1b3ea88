"""Approving and rejecting work a guardrail held (R15): only an approver may, and the audit log
records who and why. Approval releases the task to pending (routing and admission go on from
there); rejection cancels it."""

from __future__ import annotations

from uuid import UUID

from ..domain.errors import Forbidden, InvalidInput, NotFound
from ..domain.models import Task
from ..domain.states import HOLD_APPROVAL, Action, Request
from ..domain.values import storable_text
from .records import decide_and_apply
from .runtime import Runtime


async def held_by(rt: Runtime, task: Task) -> str | None:
    """The guardrail that holds ``task`` for approval (from its latest block event)."""
    for event in reversed(await rt.store.events(task.id, task.tenant)):
        if event.action == Action.BLOCK.value:
            rule = event.data.get("rule")
            return str(rule) if rule is not None else None
    return None


async def decide_approval(
    rt: Runtime,
    task_id: UUID,
    *,
    approve: bool,
    actor: str,
    reason: str,
    tenant: str | None = None,
    approver: bool | None = None,
) -> Task:
    """Approve (to pending) or reject (to cancelled) a task held for approval.

    ``approver``: whether the caller's role makes it an approver (the HTTP API's tokens): then
    a guardrail that names its own approvers still takes only them; None asks the
    configuration (``[approval] approvers``, or the holding rule's own list). Raises
    Forbidden for anyone else, NotFound for a task not visible in ``tenant``, and
    TransitionRefused for a task not held for approval; nothing is written then.
    """
    if not actor:
        raise InvalidInput("must say who decides", "actor")
    if not reason.strip():
        raise InvalidInput("must say why", "reason")
    storable_text(reason, "reason")
    found = await rt.store.get_tasks([task_id], tenant)
    if not found:
        raise NotFound(f"no task {task_id}")
    rule = await held_by(rt, found[0]) if found[0].hold == HOLD_APPROVAL else None
    if approver is None:
        approver = actor in rt.pipelines.approvers(rule)
    elif approver:
        named = rt.pipelines.rule_approvers(rule)
        approver = named is None or actor in named
    if not approver:
        verb = "approve" if approve else "reject"
        raise Forbidden(f"{actor} is not an approver and cannot {verb} task {task_id}")
    now = rt.clock.now()
    action = Action.APPROVE if approve else Action.REJECT
    async with rt.store.transaction() as tx:
        tasks = await tx.lock([task_id], tenant)
        if not tasks:
            raise NotFound(f"no task {task_id}")
        written, refusals = await decide_and_apply(
            tx, tasks, lambda task: Request(action, now, actor=actor, reason=reason)
        )
        if refusals:
            raise next(iter(refusals.values())).error()
    return written[0]
