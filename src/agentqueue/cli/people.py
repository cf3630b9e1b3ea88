"""Commands a person acts with: cancel, approve, reject, and the dead-letter queue (dlq)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from .shell import (
    _id,
    emit_json,
    print_page,
    run,
)

if TYPE_CHECKING:  # loaded when a command runs (start-up time)
    from ..domain.models import Task


def _person_action(name: str, verb: str, reason_required: bool = False) -> Callable[..., None]:
    @click.argument("task_id", metavar="ID")
    # Click takes any default, even None, as the option given: a required one has none.
    @click.option(
        "--reason",
        **({"required": True} if reason_required else {"default": ""}),
        help="Why, for the audit log.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
    @click.pass_context
    def command(ctx: click.Context, task_id: str, reason: str, as_json: bool) -> None:
        tid = _id(task_id)
        opts = ctx.find_root().obj
        actor = opts["actor"]
        task = run(ctx, lambda q: getattr(q, name)(tid, actor=actor, reason=reason))
        _acted(task, f"{verb} {task.id}{_by(ctx, actor)}", as_json)

    return command


def _by(ctx: click.Context, actor: str) -> str:
    """`` by ACTOR`` for a line saying what was done; nothing through a server, where the
    token's name acts and the answer does not say it."""
    return "" if ctx.find_root().obj["api"] else f" by {actor}"


def _acted(task: Task, done: str, as_json: bool) -> None:
    if as_json:
        emit_json(task.to_json())
    else:
        click.echo(f"{done} (now {task.state.value})")


cancel = click.command("cancel", help="Cancel a task that has not ended.")(
    _person_action("cancel", "cancelled")
)


approve = click.command(
    "approve",
    help="Release a task a guardrail holds for approval (approvers only; --actor says who).",
)(_person_action("approve", "approved", reason_required=True))
reject = click.command(
    "reject", help="Cancel a task a guardrail holds for approval (approvers only)."
)(_person_action("reject", "rejected", reason_required=True))


@click.group()
def dlq() -> None:
    """The dead-letter queue: list, review, requeue, archive."""


@dlq.command("list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue from a previous page's next_cursor.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def dlq_list(ctx: click.Context, limit: int, cursor: str | None, as_json: bool) -> None:
    """Tasks in dead_letter or manual_review."""
    page = run(ctx, lambda q: q.dead_letters(limit=limit, cursor=cursor))
    print_page(page, as_json, empty="no tasks in dead_letter or manual_review", errors=True)


dlq.command("review", help="Take a dead letter into manual review.")(
    _person_action("review", "taken for review:")
)


@dlq.command("requeue")
@click.argument("task_id", metavar="ID")
@click.option("--reason", default="", help="Why, for the audit log.")
@click.option("--assignee", help="Hand it to this assignee (routed afresh for it).")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.pass_context
def dlq_requeue(
    ctx: click.Context, task_id: str, reason: str, assignee: str | None, as_json: bool
) -> None:
    """Put a dead letter back in the queue (retry count reset)."""
    tid = _id(task_id)
    actor = ctx.find_root().obj["actor"]
    task = run(ctx, lambda q: q.requeue(tid, actor=actor, reason=reason, assignee=assignee))
    handed = f" to {task.assignee}" if assignee is not None else ""
    _acted(task, f"requeued {task.id}{handed}{_by(ctx, actor)}", as_json)


dlq.command("archive", help="Discard a dead letter for good.")(
    _person_action("archive", "archived")
)


COMMANDS = (
    cancel,
    approve,
    reject,
    dlq,
)
"""The commands this module adds to ``agentqueue``."""
