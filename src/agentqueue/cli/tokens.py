"""API tokens: create, list, revoke."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from .shell import (
    _ago,
    emit_json,
    run,
    table,
)


@click.group()
def tokens() -> None:
    """API tokens: create (the secret is printed once), list, revoke."""


@tokens.command("create")
@click.option("--name", required=True, help="The token's name: the actor on all it does.")
@click.option(
    "--role",
    required=True,
    type=click.Choice(["submitter", "approver", "operator", "admin", "worker"]),
    help="What it may do (each of submitter < approver < operator < admin includes the one "
    "before; worker: tool results).",
)
@click.option("--tenant", help="Its tenant (default: the default tenant; admin: none, all).")
@click.option("--expires", help="Lifetime: 30m, 12h, 90d, 2w (default: never).")
@click.option("--json", "as_json", is_flag=True, help="Print the token and secret as JSON.")
@click.pass_context
def tokens_create(
    ctx: click.Context,
    name: str,
    role: str,
    tenant: str | None,
    expires: str | None,
    as_json: bool,
) -> None:
    """Make a token and print its secret, this once (only a hash is kept)."""
    made = run(ctx, lambda q: q.create_token(name, role=role, tenant=tenant, expires=expires))
    if as_json:
        emit_json(made.to_json(datetime.now(UTC)))
        return
    scope = made.record.tenant or "every tenant"
    until = _ago(made.record.expires_at) if made.record.expires_at else "never"
    click.echo(f"token {made.record.name} ({made.record.role.value}, {scope}; expires {until})")
    click.echo(made.secret)
    click.echo("the secret is shown only now; keep it somewhere safe", err=True)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def tokens_list(ctx: click.Context, as_json: bool) -> None:
    """Every token with its role, tenant and status (never a secret)."""
    found = run(ctx, lambda q: q.tokens())
    now = datetime.now(UTC)
    if as_json:
        emit_json([t.to_json(now) for t in found])
        return
    table(
        ["name", "role", "tenant", "status", "prefix", "created", "expires"],
        [
            [
                t.name,
                t.role.value,
                t.tenant or "*",
                t.status(now),
                t.prefix,
                _ago(t.created_at),
                _ago(t.expires_at) if t.expires_at else "never",
            ]
            for t in found
        ],
    )


@tokens.command("revoke")
@click.argument("name")
@click.pass_context
def tokens_revoke(ctx: click.Context, name: str) -> None:
    """Revoke token NAME (API processes stop taking it within [api] token_cache_secs)."""
    revoked = run(ctx, lambda q: q.revoke_token(name))
    click.echo(f"revoked token {revoked.name}")


COMMANDS = (tokens,)
"""The commands this module adds to ``agentqueue``."""
