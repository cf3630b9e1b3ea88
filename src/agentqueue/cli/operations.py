"""Commands that run the queue: migrate, stats, agents, pause, resume, schedules, verify."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..domain.errors import InvalidInput
from .shell import (
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    QueueLike,
    _ago,
    _short,
    emit_json,
    fail,
    progress,
    read_json_arg,
    run,
    run_db,
    table,
)

if TYPE_CHECKING:  # loaded when the command runs (start-up time)
    from ..queue import AsyncQueue
    from ..service.audit import VerifyReport


@click.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Bring the database schema up to date."""

    async def go(q: AsyncQueue) -> tuple[list[int], int]:
        applied = await q.migrate()
        return applied, await q.store.schema_version()

    applied, version = run_db(ctx, go)
    if applied:
        click.echo(
            f"applied migrations {', '.join(map(str, applied))}; schema at version {version}"
        )
    else:
        click.echo(f"schema already at version {version}")


@click.command()
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def stats(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Task counts by state."""

    result = run(ctx, lambda q: q.stats(), tenant=tenant)
    if as_json:
        emit_json(result.to_json())
        return
    table(["state", "tasks"], [[s.value, n] for s, n in result.by_state.items()])
    click.echo(f"total  {result.total}")


@click.command("agents")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def agents_cmd(ctx: click.Context, as_json: bool) -> None:
    """The configured agents: what routing may give them, and their load against their cap."""
    loads = run(ctx, lambda q: q.agents())
    if as_json:
        emit_json([a.to_json() for a in loads])
        return
    if not loads:
        click.echo("no agents configured")
        return
    table(
        ["AGENT", "TASK TYPES", "LABELS", "ADMITTED", "CAP"],
        [
            [a.name, ",".join(a.task_types), ",".join(a.labels), a.admitted, a.max_concurrent]
            for a in loads
        ],
    )


@click.command()
@click.argument("task_type", metavar="TYPE", required=False)
@click.option("--reason", default="", help="Why, for the log and `pause` listing.")
@click.option("--json", "as_json", is_flag=True, help="Print the paused types as JSON.")
@click.pass_context
def pause(ctx: click.Context, task_type: str | None, reason: str, as_json: bool) -> None:
    """Pause task type TYPE during an incident: none of its tasks is admitted or claimed until
    `resume TYPE` (running ones go on). Without TYPE, list the paused types."""
    actor = ctx.find_root().obj["actor"]

    async def go(queue: QueueLike) -> list[Any]:
        if task_type is not None:
            await queue.pause(task_type, actor=actor, reason=reason)
        return await queue.paused()

    paused = run(ctx, go)
    if as_json:
        emit_json([p.to_json() for p in paused])
    elif task_type is not None:
        click.echo(f"paused {task_type}")
    elif not paused:
        click.echo("no task type is paused")
    else:
        table(
            ["TYPE", "SINCE", "BY", "REASON"],
            [[p.task_type, _ago(p.paused_at), p.paused_by, p.reason] for p in paused],
        )


@click.command()
@click.argument("task_type", metavar="TYPE")
@click.pass_context
def resume(ctx: click.Context, task_type: str) -> None:
    """Resume task type TYPE after `pause`."""
    actor = ctx.find_root().obj["actor"]
    resumed = run(ctx, lambda q: q.resume(task_type, actor=actor))
    click.echo(f"resumed {task_type}" if resumed else f"{task_type} was not paused")


@click.group()
def schedules() -> None:
    """Cron schedules: submit a task at every slot of a cron expression."""


@schedules.command("add")
@click.argument("name")
@click.option(
    "--cron",
    "cron_expr",
    required=True,
    help='Five cron fields in the time zone, e.g. "*/5 * * * *", or @hourly/@daily/...',
)
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone, e.g. Asia/Shanghai.")
@click.option(
    "--task",
    "task_json",
    required=True,
    help="Task fields as a JSON object (title, task_type, ...), or @file.json (@- for stdin).",
)
@click.option(
    "--catch-up",
    type=click.Choice(["skip", "once"]),
    default="skip",
    show_default=True,
    help="Slots missed while no scheduler ran: skip them, or fire the latest one once.",
)
@click.option("--tenant", help="Owner of the schedule and of its tasks.")
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@click.pass_context
def schedules_add(
    ctx: click.Context,
    name: str,
    cron_expr: str,
    tz: str,
    task_json: str,
    catch_up: str,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Add schedule NAME: one task per slot, exactly once even with several schedulers."""
    try:
        task = read_json_arg(task_json, "task")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    added = run(
        ctx,
        lambda q: q.add_schedule(
            name, cron=cron_expr, task=task, tz=tz, catch_up=catch_up, tenant=tenant
        ),
    )
    if as_json:
        emit_json(added.to_json())
    else:
        click.echo(
            f"added schedule {added.name} (tenant {added.tenant}); first slot {_ago(added.next_at)}"
        )


@schedules.command("list")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def schedules_list(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """List schedules by tenant and name (times in UTC)."""
    found = run(ctx, lambda q: q.schedules(tenant=tenant))
    if as_json:
        emit_json([s.to_json() for s in found])
        return
    table(
        ["name", "tenant", "cron", "tz", "catch_up", "next", "last slot", "task"],
        [
            [
                s.name,
                s.tenant,
                s.cron,
                s.tz,
                s.catch_up.value,
                _ago(s.next_at),
                _ago(s.last_slot_at),
                _short(str(s.task.get("title", "")), 32),
            ]
            for s in found
        ],
    )


@schedules.command("rm")
@click.argument("name")
@click.option("--tenant", help="Tenant of the schedule.")
@click.option("--json", "as_json", is_flag=True, help="Print the removed schedule as JSON.")
@click.pass_context
def schedules_rm(ctx: click.Context, name: str, tenant: str | None, as_json: bool) -> None:
    """Remove schedule NAME (tasks it already submitted stay)."""
    removed = run(ctx, lambda q: q.remove_schedule(name, tenant=tenant))
    if as_json:
        emit_json(removed.to_json())
    else:
        click.echo(f"removed schedule {removed.name} (tenant {removed.tenant})")


@click.command()
@click.pass_context
def verify(ctx: click.Context) -> None:
    """Check every task's audit chain, the global sequence against the signed anchors (and the
    anchor file), and the append-only triggers; exit 1 naming what does not hold."""
    if ctx.find_root().obj["api"] is None:
        tty = sys.stderr.isatty()

        async def checked(q: AsyncQueue) -> VerifyReport:
            from ..service.audit import UNKEYED_WARNING

            if q.settings.audit.key_file is None and q.settings.audit.key_env is None:
                click.echo(f"warning: {UNKEYED_WARNING}", err=True)
            if not tty:
                return await q.verify()
            with progress((await q.stats()).total, "task", "verifying") as step:
                return await q.verify(progress=step)

        report = run_db(ctx, checked)
    else:
        report = run(ctx, lambda q: q.verify())
    if report.ok:
        click.echo(f"ok: {report.tasks} tasks, {report.events} events, every chain holds")
        return
    for problem in report.problems:
        click.echo(f"BROKEN: {problem}", err=True)
    if report.breaks:
        click.echo(f"BROKEN: {report.breaks[0]}", err=True)
        for extra in report.breaks[1:10]:
            click.echo(f"  also: {extra}", err=True)
        click.echo(f"{len(report.breaks)} broken chain(s) in {report.tasks} tasks", err=True)
    sys.exit(EXIT_ERROR)


@click.group()
def audit() -> None:
    """The audit log's anchors (R24)."""


@audit.command("anchor")
@click.pass_context
def audit_anchor(ctx: click.Context) -> None:
    """Sign an anchor over the events not yet anchored: the global numbers it covers, the
    numbers among them that are no event (gaps), a running hash (also appended to [audit]
    anchor_file); the scheduler leader does this once a minute."""
    made = run_db(ctx, lambda q: q.anchor_audit())
    if not made:
        click.echo("nothing new to anchor")
    for anchor in made:
        events = anchor.count - (anchor.after or 0) - anchor.gap_count
        click.echo(
            f"anchor {anchor.id}: {events} events, {anchor.gap_count} gaps, "
            f"up to #{anchor.count}, {anchor.digest[:16]}..."
        )


COMMANDS = (
    migrate,
    stats,
    agents_cmd,
    pause,
    resume,
    schedules,
    verify,
    audit,
)
"""The commands this module adds to ``agentqueue``."""
