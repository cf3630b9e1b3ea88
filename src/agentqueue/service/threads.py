"""Threads (R25): a reply names the task it answers (``in_reply_to``); a thread is the first
task and every reply below it. Which kinds take replies, and what a reply of theirs is, their
pipeline says (``Pipelines.reply``); mail does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..domain.models import Task
from . import reads
from .runtime import Runtime

if TYPE_CHECKING:
    from .submit import SubmitResult

MAX_DEPTH = 1000
"""How far up a thread is followed (a guard; threads are never cyclic: a reply names an
older task)."""


async def send_reply(rt: Runtime, task: Task, body: Any) -> SubmitResult:
    """Submit the reply ``task``'s agent sent (a ``{"reply": body}`` line): the submission its
    pipeline makes of ``body``, checked like any. InvalidInput naming the field if its kind takes
    no replies or ``body`` is not one; a reply already sent is not sent again (its result says
    ``created`` False)."""
    # The write path (and the task's model, pydantic) is loaded here, not for reading a thread
    # (``show``, start-up time).
    from .submit import submit_many

    fields = rt.pipelines.reply(task, body)
    (result,) = await submit_many(rt, [fields], tenant=task.tenant, single=True)
    return result


async def thread(rt: Runtime, task_id: UUID, tenant: str | None) -> list[Task]:
    """The thread ``task_id`` is in: its first task, then the replies, breadth first and oldest
    first at each level. NotFound if the task is not visible in ``tenant``."""
    task = await reads.get(rt, task_id, tenant)
    root = task
    for _ in range(MAX_DEPTH):
        if root.in_reply_to is None:
            break
        found = await rt.store.get_tasks([root.in_reply_to], root.tenant)
        if not found:
            break
        root = found[0]
    out = [root]
    seen = {root.id}
    level = [root.id]
    while level:
        below = [t for t in await rt.store.replies(root.tenant, level) if t.id not in seen]
        seen.update(t.id for t in below)
        out.extend(below)
        level = [t.id for t in below]
    return out
