"""What people (and the API on their behalf) do to tasks: cancel, and the dead-letter actions
review, requeue and archive (R8, R10). Each is audited with who and why."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ..domain.errors import InvalidInput, NotFound
from ..domain.models import Task
from ..domain.states import Action, Request
from ..domain.values import storable_text
from ..spec import check_name
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
    assignee: str | None = None,
) -> list[Task]:
    """Apply ``action`` to every task, all or nothing.

    ``assignee`` (REQUEUE only): the tasks' new assignee, written with the requeue; each task is
    routed afresh for it, as admission routes (InvalidInput naming ``assignee`` when no agent
    can take a task).

    Raises NotFound if a task is not visible in ``tenant`` and TransitionRefused if the state
    machine refuses any of them; then nothing is written.
    """
    if action not in PERSON_ACTIONS:
        raise InvalidInput(f"{action.value} is not something a person does to a task", "action")
    if not actor:
        raise InvalidInput("must say who acts", "actor")
    storable_text(reason, "reason")
    if assignee is not None:
        if action is not Action.REQUEUE:
            raise InvalidInput(f"only a requeue takes one ({action.value} does not)", "assignee")
        try:
            check_name(assignee, "assignee")
        except ValueError as exc:
            raise InvalidInput(str(exc), "assignee") from None
    ids = list(dict.fromkeys(task_ids))
    now = rt.clock.now()
    async with rt.store.transaction() as tx:
        tasks = await tx.lock(ids, tenant)
        missing = set(ids) - {t.id for t in tasks}
        if missing:
            raise NotFound(f"no task {sorted(map(str, missing))[0]}")
        agents: dict[UUID, str | None] = {}
        if assignee is not None:
            agents = {t.id: routed_agent(rt, t, assignee) for t in tasks}
        written, refusals = await decide_and_apply(
            tx,
            tasks,
            lambda task: Request(
                action,
                now,
                actor=actor,
                reason=reason,
                assignee=assignee,
                agent=agents.get(task.id),
            ),
        )
        if refusals:
            raise next(iter(refusals.values())).error()
    order = {task_id: i for i, task_id in enumerate(ids)}
    return sorted(written, key=lambda t: order[t.id])


def routed_agent(rt: Runtime, task: Task, assignee: str) -> str | None:
    """The agent ``task`` goes to once ``assignee`` is its assignee, routed by its pipeline as
    admission routes it: the assignee's agent, or None when routing leaves the task to any
    executor serving its type (no agents configured). InvalidInput naming ``assignee`` when no
    agent can take it: a requeued task is queued at once, so it cannot wait for one."""
    route = rt.pipelines.route(task.kind, task.evolve(assignee=assignee))
    if route.agents is None:
        return None
    if not route.agents:
        raise InvalidInput(route.reason, "assignee")
    return assignee if assignee in route.agents else route.agents[0]
