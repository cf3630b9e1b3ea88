"""The ``agentqueue`` command: a thin shell over AsyncQueue, or over AsyncClient with ``--api``.

Exit codes: 0 success, 2 bad input (usage errors and invalid fields), 1 anything else.

With ``--api URL`` (or ``AGENTQUEUE_API``) the one-shot commands ask that server instead of
opening a database, with the token in the environment variable ``--token-env`` names (never on
the command line, where other users' ``ps`` would show it); the server acts as the token's name,
so ``--actor`` is ignored. Commands that run on a database themselves (worker, serve,
scheduler, migrate, api, bench) refuse ``--api``.

A one-shot command (everything but ``worker``, ``serve`` and ``scheduler``) waits at most
:data:`ONE_SHOT_WAIT_SECS` for a database server it cannot reach, then says so; one that finds a
SQLite file locked by another process's write says it is waiting and tries again until the lock
is gone (at most ``--lock-wait`` seconds). A fault waiting cannot mend (no such database, a
wrong password, a bad option, a schema newer than this release) fails at once, naming it.

This package holds the group and its global options; shell.py what every command shares;
tasks.py, people.py, operations.py, deliveries.py, tokens.py and processes.py the commands, by
concern.
"""

from __future__ import annotations

import importlib

import click
from click.core import ParameterSource

from .. import __version__
from ..client.names import TOKEN_ENV
from ..store import DEFAULT_URL
from .shell import (
    DATABASE_ONLY,
    DEFAULT_LOCK_WAIT_SECS,
    EXIT_BAD_INPUT,
    _default_actor,
    fail,
)


class CommandTable(click.Group):
    """The group of :data:`COMMANDS`, each imported from its module when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module, __name__), attr)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=CommandTable,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--db",
    envvar="AGENTQUEUE_DB",
    default=None,
    help=f"Database URL: sqlite:///file.db or postgresql://... (env AGENTQUEUE_DB; else db in "
    f"the config file; else {DEFAULT_URL}).",
)
@click.option(
    "--config",
    envvar="AGENTQUEUE_CONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML configuration file (env AGENTQUEUE_CONFIG).",
)
@click.option(
    "--actor",
    default=_default_actor,
    help="Who is acting, for the audit log (env AGENTQUEUE_ACTOR; default: your user name). "
    "Ignored with --api: the server records the token's name.",
)
@click.option(
    "--api",
    envvar="AGENTQUEUE_API",
    metavar="URL",
    default=None,
    help="Ask the agentqueue server at URL (http://host:8077) instead of opening a database "
    "(env AGENTQUEUE_API). Not for worker, serve, scheduler, migrate, api or bench.",
)
@click.option(
    "--token-env",
    metavar="VAR",
    default=TOKEN_ENV,
    show_default=True,
    help="The environment variable holding the API token for --api (a token is never taken "
    "on the command line).",
)
@click.option(
    "--lock-wait",
    envvar="AGENTQUEUE_LOCK_WAIT",
    type=click.FloatRange(0, 86_400),
    default=DEFAULT_LOCK_WAIT_SECS,
    show_default=True,
    help="Seconds a command waits while another process holds a SQLite file's write lock "
    "(env AGENTQUEUE_LOCK_WAIT).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Log lines of worker, serve, scheduler and api: text, or one JSON object a line "
    "(default: [logging] format in the config file, else text).",
)
@click.version_option(__version__, prog_name="agentqueue")
@click.pass_context
def main(
    ctx: click.Context,
    db: str | None,
    config: str | None,
    actor: str,
    api: str | None,
    token_env: str,
    lock_wait: float,
    log_format: str | None,
) -> None:
    """agentqueue: a durable task queue and scheduler for AI-agent work."""
    if api is not None and ctx.invoked_subcommand in DATABASE_ONLY:
        typed = ctx.get_parameter_source("api") is ParameterSource.COMMANDLINE
        fail(
            f"{ctx.invoked_subcommand} works on a database itself, not through a server: "
            f"drop {'--api' if typed else 'AGENTQUEUE_API'} (and name the database with --db)",
            EXIT_BAD_INPUT,
        )
    ctx.obj = {
        "db": db,
        "config": config,
        "actor": actor,
        "api": api,
        "token_env": token_env,
        "lock_wait": lock_wait,
        "log_format": log_format,
    }


# The commands, a module for each concern (they import the shell, never this package), each
# imported when its command is used: `agentqueue list` loads the task commands, not the
# processes' or the benchmarks' (start-up time). `--help` lists them all, and so loads them all.
COMMANDS: dict[str, tuple[str, str]] = {
    **{
        name: (".tasks", attr)
        for name, attr in (
            ("submit", "submit"),
            ("list", "list_cmd"),
            ("show", "show"),
            ("tool-result", "tool_result"),
            ("events", "events"),
            ("logs", "logs"),
        )
    },
    **{name: (".people", name) for name in ("cancel", "approve", "reject", "dlq")},
    **{
        name: (".operations", attr)
        for name, attr in (
            ("migrate", "migrate"),
            ("stats", "stats"),
            ("agents", "agents_cmd"),
            ("pause", "pause"),
            ("resume", "resume"),
            ("schedules", "schedules"),
            ("verify", "verify"),
            ("audit", "audit"),
        )
    },
    "deliveries": (".deliveries", "deliveries"),
    "tokens": (".tokens", "tokens"),
    **{
        name: (".processes", attr)
        for name, attr in (
            ("worker", "worker"),
            ("serve", "serve"),
            ("api", "api_cmd"),
            ("scheduler", "scheduler"),
        )
    },
    "bench": ("..bench.cli", "bench"),  # kept apart: the benchmarks live in bench/
}
"""Each command's name: the module (relative to this package) and the name it has there."""
