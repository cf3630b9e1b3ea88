"""Dependencies (R13): release a task held for its dependencies when every one completed, and
cancel it, with the reason, when one failed, was cancelled, dead-lettered or is gone.

Only tasks held for dependencies are looked at, and the release names that hold, so a task
blocked for anything else (a guardrail waiting for approval) is never released here, even with
an empty depends_on (the seed's Bug-B).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from ..domain.models import Task
from ..domain.states import HOLD_DEPENDENCIES, Action, Request, TaskState
from ..service.records import ADMITTER, block_request, decide_and_apply
from ..service.runtime import Runtime

BROKEN = frozenset(
    {TaskState.FAILED, TaskState.CANCELLED, TaskState.DEAD_LETTER, TaskState.ARCHIVED}
)
"""A dependency in one of these states will never complete."""


@dataclass(frozen=True)
class Verdict:
    """What the dependency step does with one held task."""

    release: bool
    reason: str = ""


def verdict(task: Task, states: Mapping[UUID, TaskState]) -> Verdict | None:
    """Release when every dependency completed; cancel (with the first broken dependency as
    the reason) when one never will; None while some are still on their way."""
    for dep in task.depends_on:
        state = states.get(dep)
        if state is None:
            return Verdict(False, f"dependency {dep} no longer exists")
        if state in BROKEN:
            return Verdict(False, f"dependency {dep} is {state.value}")
    if all(states.get(dep) is TaskState.COMPLETED for dep in task.depends_on):
        return Verdict(True, "every dependency completed")
    return None


@dataclass(frozen=True)
class DependencyReport:
    """How many held tasks were released and how many cancelled."""

    released: int
    cancelled: int


async def advance_dependencies(
    rt: Runtime, limit: int = 500, rounds: int = 100
) -> DependencyReport:
    """Release or cancel every held task whose dependencies settled. A cancellation can settle
    the dependencies of further tasks (a failed task's whole subtree goes), so the step goes
    round until nothing moves (at most ``rounds`` times a tick)."""
    released = cancelled = 0
    for _ in range(rounds):
        r, c = await _advance_once(rt, limit)
        released += r
        cancelled += c
        if r + c == 0:
            break
    return DependencyReport(released, cancelled)


async def _advance_once(rt: Runtime, limit: int) -> tuple[int, int]:
    now = rt.clock.now()
    async with rt.store.transaction() as tx:
        ready = await tx.lock_dependents_ready(limit)
        if not ready:
            return 0, 0
        deps = sorted({d for task in ready for d in task.depends_on}, key=str)
        states = await tx.task_states(deps)
        verdicts = {task.id: verdict(task, states) for task in ready}

        def request(task: Task) -> Request:
            v = verdicts[task.id]
            assert v is not None  # the store returned only settled tasks
            if v.release:
                return Request(
                    Action.UNBLOCK, now, actor=ADMITTER, reason=v.reason, hold=HOLD_DEPENDENCIES
                )
            return Request(Action.CANCEL, now, actor=ADMITTER, reason=v.reason)

        settled = [task for task in ready if verdicts[task.id] is not None]
        written, _ = await decide_and_apply(tx, settled, request)
        released = [t for t in written if t.state is TaskState.PENDING]
        # The next stage of the task's pipeline (a guardrail) may hold it again at once.
        holds = {}
        for task in released:
            pipeline = rt.pipelines.get(task.kind)
            hold = pipeline.hold_released(task) if pipeline is not None else None
            if hold is not None:
                holds[task.id] = hold
        if holds:
            await decide_and_apply(
                tx,
                [t for t in released if t.id in holds],
                lambda task: block_request(holds[task.id], now),
            )
    return len(released), len(written) - len(released)
