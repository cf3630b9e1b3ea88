"""What people (and the API on their behalf) do to tasks: cancel, and the dead-letter actions
review, requeue and archive (R8, R10). Each is audited with who and why."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ..domain.errors import InvalidInput, NotFound
from ..domain.models import Task
from ..domain.states import Action, Request
from ..domain.values import NUL, NUL_PROBLEM
from .records import decide_and_apply
from .runtime import Runtime

PERSON_ACTIONS = frozenset({Action.CANCEL, Action.REVIEW, Action.REQUEUE, Action.ARCHIVE})


async def act(
    rt: Runtime,
    action: Action,
    task_ids: Sequence[UUID],
    *,
    actor: str,
    reason: str = "",
    tenant: str | None = None,
) -> list[Task]:
    """Apply ``action`` to every task, all or nothing.

    Raises NotFound if a task is not visible in ``tenant`` and TransitionRefused if the state
    machine refuses any of them; then nothing is written.
    """
    if action not in PERSON_ACTIONS:
        raise InvalidInput(f"{action.value} is not something a person does to a task", "action")
    if not actor:
        raise InvalidInput("must say who acts", "actor")
    if NUL in reason:
        raise InvalidInput(NUL_PROBLEM, "reason")
    ids = list(dict.fromkeys(task_ids))
    now = rt.clock.now()
    async with rt.store.transaction() as tx:
        tasks = await tx.lock(ids, tenant)
        missing = set(ids) - {t.id for t in tasks}
        if missing:
            raise NotFound(f"no task {sorted(map(str, missing))[0]}")
        written, refusals = await decide_and_apply(
            tx, tasks, lambda task: Request(action, now, actor=actor, reason=reason)
        )
        if refusals:
            raise next(iter(refusals.values())).error()
    order = {task_id: i for i, task_id in enumerate(ids)}
    return sorted(written, key=lambda t: order[t.id])
