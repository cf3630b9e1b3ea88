"""``agentqueue deliveries``: callbacks, replies on GitHub and alerts in the outbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..domain.delivery_kinds import DELIVERY_STATES, KINDS
from .shell import _ago, _short, emit_json, run, table

if TYPE_CHECKING:  # loaded when a command runs (start-up time)
    from ..domain.deliveries import DeliveryRecord


@click.group()
def deliveries() -> None:
    """Deliveries from the outbox (callbacks, GitHub replies, alerts): list, show, retry."""


@deliveries.command("list")
@click.option("--kind", type=click.Choice(KINDS), help="Only this kind.")
@click.option("--state", type=click.Choice(DELIVERY_STATES), help="Only in this state.")
@click.option("--task", "task_id", help="Only about this task.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def deliveries_list(
    ctx: click.Context,
    kind: str | None,
    state: str | None,
    task_id: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List deliveries, newest first."""
    found = run(ctx, lambda q: q.deliveries(kind=kind, state=state, task_id=task_id, limit=limit))
    if as_json:
        emit_json([d.to_json() for d in found])
        return
    table(
        ["id", "kind", "state", "task", "end", "tries", "next", "last error"],
        [
            [
                d.id,
                d.kind,
                d.state,
                str(d.task_id),
                d.event_seq,
                d.attempts,
                _ago(d.next_attempt_at) if d.state == "pending" else "",
                _short(d.last_error or "", 40),
            ]
            for d in found
        ],
    )


def _show(d: DeliveryRecord) -> None:
    click.echo(f"delivery {d.id}: {d.kind} about task {d.task_id} (end {d.event_seq})")
    click.echo(f"  state:    {d.state}{' (being sent now)' if d.leased else ''}")
    if d.url:
        click.echo(f"  url:      {d.to_json()['url']}")
    click.echo(f"  stored:   {_ago(d.created_at)}")
    if d.delivered_at:
        click.echo(f"  delivered: {_ago(d.delivered_at)}")
    elif d.given_up_at:
        click.echo(f"  given up: {_ago(d.given_up_at)}")
    else:
        click.echo(f"  next try: {_ago(d.next_attempt_at)}")
    click.echo(f"  tries:    {d.attempts}")
    for t in d.tries:
        status = "-" if t.status_code is None else str(t.status_code)
        click.echo(f"    {_ago(t.at)}  {status:>3}  {t.duration_ms:8.1f} ms  {t.error or 'ok'}")


@deliveries.command("show")
@click.argument("delivery_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def deliveries_show(ctx: click.Context, delivery_id: int, as_json: bool) -> None:
    """Show delivery ID with every try (time, status code, duration, error)."""
    found = run(ctx, lambda q: q.delivery(delivery_id))
    if as_json:
        emit_json(found.to_json())
    else:
        _show(found)


@deliveries.command("retry")
@click.argument("delivery_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the delivery as JSON.")
@click.pass_context
def deliveries_retry(ctx: click.Context, delivery_id: int, as_json: bool) -> None:
    """Make a pending or given-up delivery ID due now (its tries are kept)."""
    found = run(ctx, lambda q: q.retry_delivery(delivery_id))
    if as_json:
        emit_json(found.to_json())
    else:
        click.echo(f"delivery {found.id} ({found.kind}) is due now")


COMMANDS = (deliveries,)
"""The commands this module adds to ``agentqueue``."""
