"""Cron schedules (R18): add, list and remove them, and the step that fires their due slots.

Each slot fires exactly once however many schedulers run the step, by the database rather than
by leadership: the task of a slot carries the idempotency key ``cron:<name>:<slot>``, unique per
tenant, so a second submit of the slot matches the first task instead of creating one; and
moving a schedule on to its next slot is a write guarded by the slot it read. The task is
submitted before the schedule moves on, so a scheduler that stops in between leaves the slot
for the next one to submit (and match) again: never lost, never doubled.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..domain.errors import FieldProblem, InvalidInput, NotFound
from ..domain.schedule import CatchUp, Schedule
from ..intake.cron import CronSlots, load_zone, plan, slot_key
from ..intake.cron import problems as cron_problems
from ..spec import parse_specs
from .runtime import Runtime
from .submit import submit_many

log = logging.getLogger(__name__)

ACTOR = "cron"
"""``requested_by`` of every task a schedule submits."""
SOURCE = "cron"
DUE_BATCH = 100
"""Schedules handled per call of :func:`fire_due_schedules`."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
# Fields each fired task gets from its schedule and slot, so a template may not set them.
_SET_BY_SCHEDULE = {
    "tenant": "set by the schedule (give its tenant instead)",
    "source": "set by the schedule (always cron)",
    "source_id": "set by the schedule (none: each slot is its own task)",
    "idempotency_key": "set by the schedule (one key per slot)",
    "requested_by": "set by the schedule (always cron)",
    "run_after": "a fixed time does not fit a recurring task",
    "depends_on": "a recurring task cannot depend on fixed task ids",
}


def _check_name(name: object) -> FieldProblem | None:
    if not isinstance(name, str) or not _NAME.match(name):
        return FieldProblem(
            "name", "must be 1-64 letters, digits or _.@- starting with a letter or digit"
        )
    return None


def _check_template(rt: Runtime, name: str, tenant: str, task: object) -> list[FieldProblem]:
    """Problems of a task template, named ``task.<field>``, as a fired task would meet them."""
    if not isinstance(task, Mapping):
        return [FieldProblem("task", "must be a JSON object of task fields")]
    problems = [
        FieldProblem(f"task.{field}", why)
        for field, why in _SET_BY_SCHEDULE.items()
        if field in task
    ]
    if problems:
        return problems
    try:
        parse_specs(
            [_fired_fields(task, tenant, slot_key(name, rt.clock.now()))],
            max_payload_bytes=rt.settings.queue.max_payload_bytes,
            allow_private_callbacks=rt.settings.callbacks.allow_private,
            single=True,
        )
    except InvalidInput as exc:
        return [
            FieldProblem(f"task.{p.field}" if p.field else "task", p.message) for p in exc.problems
        ]
    return []


def _fired_fields(task: Mapping[str, Any], tenant: str, key: str) -> dict[str, Any]:
    return {
        **task,
        "tenant": tenant,
        "source": SOURCE,
        "source_id": None,
        "idempotency_key": key,
        "requested_by": ACTOR,
    }


def _scope(rt: Runtime, tenant: str | None) -> str:
    return tenant or rt.settings.queue.default_tenant


async def add_schedule(
    rt: Runtime,
    name: str,
    *,
    cron: str,
    task: Mapping[str, Any],
    tz: str = "UTC",
    catch_up: CatchUp | str = CatchUp.SKIP,
    tenant: str | None = None,
    actor: str = "api",
) -> Schedule:
    """Add a schedule that submits ``task`` at every slot of ``cron`` in time zone ``tz``.

    Every field is checked first, and InvalidInput names each bad one (``name``, ``cron``,
    ``tz``, ``catch_up``, ``tenant``, ``task.title``...); nothing is written then. A name already
    used in the tenant is refused too (remove the old schedule first). The first slot is the
    first one after now.
    """
    scope = _scope(rt, tenant)
    now = rt.clock.now()
    problems: list[FieldProblem] = []
    name_problem = _check_name(name)
    if name_problem:
        problems.append(name_problem)
    if not isinstance(cron, str):
        problems.append(FieldProblem("cron", "must be text, e.g. '*/5 * * * *'"))
    elif not isinstance(tz, str):
        problems.append(FieldProblem("tz", "must be text, e.g. 'Europe/Berlin'"))
    else:
        problems.extend(cron_problems(cron, tz, now))
    try:
        mode = CatchUp(catch_up)
    except ValueError:
        problems.append(FieldProblem("catch_up", "must be skip or once"))
        mode = CatchUp.SKIP
    tenant_problem = _check_name(scope)
    if tenant_problem is not None:
        problems.append(FieldProblem("tenant", tenant_problem.message))
    # A bad name or tenant still lets the template be checked, under stand-ins (the longest
    # name, so the idempotency key's length is checked too).
    problems.extend(
        _check_template(
            rt,
            name if name_problem is None else "x" * 64,
            scope if tenant_problem is None else "default",
            task,
        )
    )
    if problems:
        raise InvalidInput(problems)
    expr = cron.strip()
    schedule = Schedule(
        tenant=scope,
        name=name,
        cron=expr,
        tz=tz,
        task=dict(task),
        catch_up=mode,
        next_at=CronSlots(expr, load_zone(tz)).next_after(now),
        created_by=actor,
        created_at=now,
        updated_at=now,
    )
    if not await rt.store.insert_schedule(schedule):
        raise InvalidInput(
            f"tenant {scope!r} already has a schedule named {name!r} (remove it first)", "name"
        )
    return schedule


async def list_schedules(rt: Runtime, tenant: str | None = None) -> list[Schedule]:
    """The schedules of ``tenant`` (of every tenant if None), by tenant and name."""
    return await rt.store.list_schedules(tenant)


async def remove_schedule(rt: Runtime, tenant: str | None, name: str) -> Schedule:
    """Remove a schedule (tasks it already submitted stay); return it as it was.

    NotFound if the tenant has no schedule by that name.
    """
    scope = _scope(rt, tenant)
    removed = await rt.store.delete_schedule(scope, name)
    if removed is None:
        raise NotFound(f"no schedule {name!r} in tenant {scope!r}")
    return removed


async def fire_due_schedules(rt: Runtime, limit: int = DUE_BATCH) -> int:
    """Submit the tasks of every due slot and move each schedule on; return the tasks created.

    Cheap when nothing is due: one indexed read. Missed slots (no scheduler ran at their time)
    fire or not by each schedule's ``catch_up`` (see :func:`agentqueue.intake.cron.plan`).
    Safe to run in any number of schedulers at once (see the module notes).
    """
    now = rt.clock.now()
    created = 0
    for schedule in await rt.store.due_schedules(now, limit):
        created += await _fire(rt, schedule, now)
    return created


async def _fire(rt: Runtime, schedule: Schedule, now: datetime) -> int:
    try:
        slots = CronSlots(schedule.cron, load_zone(schedule.tz))
        firing = plan(slots, schedule.next_at, now, schedule.catch_up)
    except (ValueError, ArithmeticError, RuntimeError) as exc:
        # Checked when added, so only a machine without that zone gets here: leave it be.
        log.error("schedule %s/%s cannot be read: %s", schedule.tenant, schedule.name, exc)
        return 0
    if firing is None:
        return 0
    created = 0
    if firing.slots:
        items = [
            _fired_fields(schedule.task, schedule.tenant, slot_key(schedule.name, slot))
            for slot in firing.slots
        ]
        try:
            results = await submit_many(rt, items, tenant=schedule.tenant)
            created = sum(r.created for r in results)
        except InvalidInput as exc:
            # The template was valid when added; a tightened setting (a smaller payload limit,
            # say) can refuse it now. Move on rather than fail every tick on the same slot.
            log.error(
                "schedule %s/%s: its task was refused, slot skipped: %s",
                schedule.tenant,
                schedule.name,
                exc,
            )
    fired = firing.slots[-1] if firing.slots else None
    await rt.store.advance_schedule(schedule, firing.next_at, fired, now)
    return created
