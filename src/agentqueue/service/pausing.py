"""Pausing a task type during an incident: nothing of that type is admitted or claimed until it
is resumed. Tasks already executing run on; the pause is global, over every tenant. Other
processes see a pause within a second (each reads the paused types at most once a second)."""

from __future__ import annotations

import logging

from ..domain.errors import InvalidInput
from ..domain.values import storable_text
from ..spec import check_name
from ..store.base import PausedType
from .runtime import Runtime

log = logging.getLogger("agentqueue.scheduler")


async def pause(rt: Runtime, task_type: str, *, actor: str, reason: str = "") -> PausedType:
    """Pause ``task_type`` (pausing it again changes nothing); return the pause in force."""
    _check(task_type)
    if not actor:
        raise InvalidInput("must say who acts", "actor")
    storable_text(reason, "reason")
    await rt.store.pause(task_type, actor, reason, rt.clock.now())
    rt.paused_cache = None
    log.warning("task type %s paused by %s: %s", task_type, actor, reason or "(no reason)")
    return next(p for p in await rt.store.paused() if p.task_type == task_type)


async def resume(rt: Runtime, task_type: str, *, actor: str) -> bool:
    """Resume ``task_type``; False if it was not paused."""
    _check(task_type)
    resumed = await rt.store.resume(task_type)
    rt.paused_cache = None
    if resumed:
        log.warning("task type %s resumed by %s", task_type, actor)
    return resumed


async def paused(rt: Runtime) -> list[PausedType]:
    """Every paused task type."""
    return await rt.store.paused()


def _check(task_type: str) -> None:
    try:
        check_name(task_type, "task_type")
    except ValueError as exc:
        raise InvalidInput(str(exc), "task_type") from None
