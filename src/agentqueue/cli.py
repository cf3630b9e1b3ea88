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
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource

from . import __version__
from .client import TOKEN_ENV, AsyncClient
from .domain.errors import AgentQueueError, InvalidInput, StoreLocked, StoreUnavailable
from .domain.models import Event, Task
from .domain.priority import priority_name
from .domain.states import TaskState
from .ids import parse_task_id
from .queue import AsyncQueue
from .service.reads import TaskPage
from .store import DEFAULT_URL
from .supervise import until_reachable

T = TypeVar("T")

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT = 0, 1, 2
ONE_SHOT_WAIT_SECS = 5.0
"""How long a one-shot command waits for a database server it cannot reach."""
LONG_RUNNING_OPEN_WAIT_SECS = 2.0
"""How long each try of a worker, scheduler or serve to open the database waits before it says
the database is away (it then tries again until the database answers)."""
DEFAULT_LOCK_WAIT_SECS = 300.0
LOCK_RETRY_PAUSE_SECS = 0.2
STATES = [s.value for s in TaskState]
DATABASE_ONLY = frozenset({"worker", "serve", "scheduler", "migrate", "api", "bench"})
"""Commands that work on a database themselves, never through a server's API."""

QueueLike = AsyncQueue | AsyncClient
"""What a one-shot command acts on: the database's queue, or a client of a server (``--api``);
the two have the same method names."""


def _default_actor() -> str:
    try:
        return os.environ.get("AGENTQUEUE_ACTOR") or getpass.getuser()
    except Exception:  # no user name on some containers
        return "cli"


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``error: message`` to stderr and exit."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def run(
    ctx: click.Context, action: Callable[[QueueLike], Awaitable[T]], tenant: str | None = None
) -> T:
    """Run a one-shot command's ``action`` on what the global options name: with ``--api``, an
    AsyncClient of that server (the token's tenant applies, so ``tenant`` is refused); else the
    database's queue (see :func:`run_db`). Errors become a message and an exit code."""
    opts = ctx.find_root().obj
    if opts["api"] is None:
        return run_db(ctx, action, tenant=tenant)
    if tenant is not None:
        fail(
            "--tenant: with --api the token's tenant applies (an admin token's: every tenant)",
            EXIT_BAD_INPUT,
        )
    token = _api_token(opts["token_env"])

    async def go() -> T:
        async with AsyncClient(opts["api"], token) as client:
            return await action(client)

    try:
        return asyncio.run(go())
    except (Exception, KeyboardInterrupt) as exc:
        exit_for(exc)


def _api_token(variable: str) -> str:
    token = os.environ.get(variable, "").strip()
    if not token:
        fail(
            f"--api needs a token in the environment variable {variable}, which is not set "
            "(`agentqueue tokens create` makes one)",
            EXIT_BAD_INPUT,
        )
    return token


def exit_for(exc: BaseException, unreachable: str = "") -> NoReturn:
    """Say what went wrong and exit: 2 for bad input, 130 when interrupted, else 1 (an error
    nobody meant is shown with its type; AGENTQUEUE_DEBUG=1 shows its traceback)."""
    if isinstance(exc, InvalidInput):
        fail(str(exc), EXIT_BAD_INPUT)
    if isinstance(exc, StoreUnavailable):
        fail(f"{unreachable}{exc}")
    if isinstance(exc, AgentQueueError):
        fail(str(exc))
    if isinstance(exc, KeyboardInterrupt):
        fail("interrupted", 130)
    if os.environ.get("AGENTQUEUE_DEBUG"):
        raise exc
    fail(f"unexpected {type(exc).__name__}: {exc}")


def run_db(
    ctx: click.Context,
    action: Callable[[AsyncQueue], Awaitable[T]],
    tenant: str | None = None,
    db: str | None = None,
    one_shot: bool = True,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Open the queue on the database named by the global options, run ``action``, close, map
    errors.

    A one-shot command waits at most ONE_SHOT_WAIT_SECS for an unreachable server. When another
    process holds a SQLite file's write lock past the busy timeout, nothing was written (the
    lock is taken at BEGIN), so the action is run again, after a notice, until the lock is gone
    or ``--lock-wait`` has passed. Long-running commands (worker, serve, scheduler) wait as
    their own loops decide. ``loop_factory`` makes the event loop (default: asyncio's).
    """
    opts = ctx.find_root().obj

    async def go() -> T:
        queue = AsyncQueue(
            db or opts["db"],
            config=opts["config"],
            actor=opts["actor"],
            tenant=tenant,
            open_wait_secs=ONE_SHOT_WAIT_SECS if one_shot else LONG_RUNNING_OPEN_WAIT_SECS,
        )
        try:
            return await action(queue)
        except StoreUnavailable as exc:
            saved = queue.store.commits
            if isinstance(exc, StoreLocked) and saved:
                # Running it again would repeat the writes already saved.
                raise AgentQueueError(
                    f"{exc}; part of this command was already saved, so it is not run again"
                ) from None
            raise
        finally:
            await queue.close()

    lock_wait = opts.get("lock_wait", DEFAULT_LOCK_WAIT_SECS)
    deadline = time.monotonic() + lock_wait
    told = False
    try:
        while True:
            try:
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    return runner.run(go())
            except StoreUnavailable as exc:
                if not (one_shot and isinstance(exc, StoreLocked)):
                    raise
                if time.monotonic() >= deadline:
                    fail(f"gave up after waiting {lock_wait:g} s for the database: {exc}")
                if not told:
                    click.echo(f"waiting for the database: {exc}", err=True)
                    told = True
                time.sleep(LOCK_RETRY_PAUSE_SECS)
    except (Exception, KeyboardInterrupt) as exc:
        exit_for(exc, unreachable="cannot reach the database: ")


def _log_to_stderr() -> None:
    """Log lines for the long-running commands (worker, serve, scheduler)."""
    import logging

    logging.basicConfig(
        level=os.environ.get("AGENTQUEUE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The pool warns of every failed reconnect while the database is away; the loops that wait
    # on it say so once themselves.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def emit_json(value: Any) -> None:
    """Print one JSON document."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows under headers, columns padded to fit."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
    click.echo(line.rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _ago(when: datetime | None) -> str:
    if when is None:
        return ""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def task_rows(tasks: Sequence[Task]) -> None:
    """The task table of ``list`` and ``dlq list``."""
    table(
        ["id", "state", "pri", "type", "tenant", "retries", "title", "created"],
        [
            [
                t.id,
                t.state.value,
                priority_name(t.priority),
                t.task_type,
                t.tenant,
                f"{t.retry_count}/{t.max_retries}",
                _short(t.title),
                _ago(t.created_at),
            ]
            for t in tasks
        ],
    )


def print_page(page: TaskPage, as_json: bool) -> None:
    """A page of tasks as a JSON array, or a table with the cursor of the next page."""
    if as_json:
        emit_json([t.to_json() for t in page.items])
        return
    task_rows(page.items)
    if page.next_cursor:
        click.echo(f"more: --cursor {page.next_cursor}")


def show_task(task: Task) -> None:
    """One task, field by field."""
    data = task.to_json()
    data["priority"] = f"{task.priority} ({priority_name(task.priority)})"
    width = max(len(k) for k in data)
    for key, value in data.items():
        if value in (None, [], {}):
            continue
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
        click.echo(f"{key.ljust(width)}  {shown}")


def event_rows(events: Sequence[Event]) -> None:
    """The event table of ``events``."""
    table(
        ["seq", "at", "change", "action", "actor", "reason"],
        [
            [
                e.seq,
                _ago(e.at),
                f"{e.from_state.value if e.from_state else '(new)'} -> {e.to_state.value}",
                e.action,
                e.actor,
                _short(e.reason, 60),
            ]
            for e in events
        ],
    )


# --- input parsing --------------------------------------------------------------------------


def read_json_arg(value: str, field: str) -> Any:
    """JSON text, or ``@path`` (``@-`` for stdin) holding JSON."""
    text = value
    if value.startswith("@"):
        path = value[1:]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}", field) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON ({exc.msg} at line {exc.lineno})", field) from None


_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")


def parse_when(value: str, field: str) -> datetime:
    """An ISO 8601 time (UTC if no offset) or ``+30s``/``+5m``/``+2h``/``+1d`` from now."""
    match = _RELATIVE.match(value.strip())
    if match:
        amount, unit = float(match.group(1)), match.group(2)
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        return datetime.now(UTC) + timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(
            "must be an ISO 8601 time (2026-05-01T09:00:00Z) or +30s/+5m/+2h/+1d", field
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def read_task_file(value: str) -> list[Any]:
    """Tasks from a JSON object, a JSON array, or JSON lines; ``-`` reads stdin."""
    try:
        text = sys.stdin.read() if value == "-" else Path(value).read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read {value}: {exc.strerror}", "file") from None
    stripped = text.strip()
    if not stripped:
        raise InvalidInput("holds no tasks", "file")
    try:
        parsed = json.loads(stripped)
        return parsed if isinstance(parsed, list) else [parsed]
    except json.JSONDecodeError:
        pass
    items = []
    for number, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"line {number} is not valid JSON ({exc.msg})", "file") from None
    return items


def task_id_arg(value: str) -> Any:
    """Parse an ID argument (bad ids are bad input, exit 2)."""
    return parse_task_id(value, "id")


# --- commands -------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    }


@main.command()
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


@main.command()
@click.option("--title", help="What to do, in a line.")
@click.option("--type", "task_type", help="Task type: bugfix, feature, review, test, docs, ...")
@click.option("--priority", help="0-9 (0 highest) or P0/P1/P2. Default 5.")
@click.option("--payload", help="JSON context for the agent, or @file.json (@- for stdin).")
@click.option("--tenant", help="Owner of the task.")
@click.option("--source", help="issue, pr, api, cron, manual or mail. Default api.")
@click.option("--source-id", help="Id at the source, e.g. octo/repo#12 (dedup key).")
@click.option("--assignee", help="Agent that should do it (for mail: the recipient).")
@click.option("--label", multiple=True, help="Capability the agent must have (repeatable).")
@click.option("--kind", help="Pipeline: task or mail (default: mail for --source mail).")
@click.option("--depends-on", multiple=True, help="Task id that must complete first (repeatable).")
@click.option("--idempotency-key", help="Same key, same task (required for P0).")
@click.option("--callback-url", help="POSTed the result when the task ends.")
@click.option("--timeout", help="Seconds per attempt (default by task type).")
@click.option("--max-retries", help="Automatic retries (default 3; at most 3 for P0).")
@click.option("--run-after", help="Not before: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--requested-by", help="Who asked for it (default: --actor).")
@click.option(
    "--file",
    "task_file",
    help="Submit many: a JSON object, array or JSON lines of task fields (- for stdin).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the task(s) as JSON.")
@click.pass_context
def submit(ctx: click.Context, /, task_file: str | None, as_json: bool, **flags: Any) -> None:
    """Submit a task (or many with --file). Prints the task, or the live one it matched."""
    fields = _submit_fields(flags)
    if task_file is not None:
        try:
            items = read_task_file(task_file)
        except InvalidInput as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        if not all(isinstance(item, dict) for item in items):
            fail("file: every task must be a JSON object of task fields", EXIT_BAD_INPUT)
        items = [{**fields, **item} for item in items]
        results = run(ctx, lambda q: q.submit_many(items))
        if as_json:
            emit_json([r.to_json() for r in results])
        else:
            created = sum(r.created for r in results)
            click.echo(f"{created} created, {len(results) - created} matched existing tasks")
        return
    for required in ("title", "task_type"):
        if required not in fields:
            flag = "--type" if required == "task_type" else "--title"
            fail(f"{required}: required (give {flag})", EXIT_BAD_INPUT)
    result = run(ctx, lambda q: q.submit(fields))
    if as_json:
        emit_json(result.to_json())
    elif result.created:
        click.echo(
            f"created {result.task.id} ({result.task.state.value}, "
            f"priority {priority_name(result.task.priority)})"
        )
    else:
        click.echo(
            f"exists {result.task.id} ({result.task.state.value}; "
            f"same {result.matched_by.replace('_', ' ') if result.matched_by else 'key'})"
        )


def _submit_fields(flags: dict[str, Any]) -> dict[str, Any]:
    """Turn submit's flags into task fields; only the flags given."""
    try:
        fields: dict[str, Any] = {}
        for name in (
            "title",
            "task_type",
            "priority",
            "tenant",
            "source",
            "source_id",
            "assignee",
            "kind",
            "idempotency_key",
            "callback_url",
            "requested_by",
        ):
            if flags.get(name) is not None:
                fields[name] = flags[name]
        if flags.get("payload") is not None:
            fields["payload"] = read_json_arg(flags["payload"], "payload")
        if flags.get("label"):
            fields["labels"] = list(flags["label"])
        if flags.get("depends_on"):
            fields["depends_on"] = [
                str(parse_task_id(d, "depends_on")) for d in flags["depends_on"]
            ]
        for flag, field in (("timeout", "timeout_secs"), ("max_retries", "max_retries")):
            if flags.get(flag) is not None:
                try:
                    fields[field] = int(flags[flag])
                except ValueError:
                    raise InvalidInput(
                        f"must be a whole number, got {flags[flag]!r}", field
                    ) from None
        if flags.get("run_after") is not None:
            fields["run_after"] = parse_when(flags["run_after"], "run_after")
        return fields
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)


@main.command("list")
@click.option(
    "--state", multiple=True, type=click.Choice(STATES), help="Only this state (repeatable)."
)
@click.option("--type", "task_type", multiple=True, help="Only this task type (repeatable).")
@click.option("--tenant", help="Only this tenant.")
@click.option("--source", multiple=True, help="Only this source (repeatable).")
@click.option("--source-id", help="Only tasks with this source_id.")
@click.option("--assignee", help="Only tasks with this assignee.")
@click.option("--label", multiple=True, help="Only tasks with this label (repeatable: every one).")
@click.option("--created-after", help="Created at or after: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--created-before", help="Created before: ISO 8601 time or +30s/+5m/+2h/+1d.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue from a previous page's next_cursor.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def list_cmd(
    ctx: click.Context,
    state: tuple[str, ...],
    task_type: tuple[str, ...],
    tenant: str | None,
    source: tuple[str, ...],
    source_id: str | None,
    assignee: str | None,
    label: tuple[str, ...],
    created_after: str | None,
    created_before: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List tasks, newest first."""
    try:
        after = None if created_after is None else parse_when(created_after, "created_after")
        before = None if created_before is None else parse_when(created_before, "created_before")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    page = run(
        ctx,
        lambda q: q.list(
            state=state or None,
            task_type=task_type or None,
            source=source or None,
            tenant=tenant,
            source_id=source_id,
            assignee=assignee,
            label=label or None,
            created_after=after,
            created_before=before,
            limit=limit,
            cursor=cursor,
        ),
    )
    print_page(page, as_json)


@main.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one task."""
    tid = _id(task_id)
    task = run(ctx, lambda q: q.get(tid))
    if as_json:
        emit_json(task.to_json())
    else:
        show_task(task)


@main.command("tool-result")
@click.argument("task_id", metavar="TASK")
@click.argument("call_id", metavar="CALL")
@click.option(
    "--result", "result_json", required=True, help="The result as JSON, or @file.json (@- stdin)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.pass_context
def tool_result(
    ctx: click.Context, task_id: str, call_id: str, result_json: str, as_json: bool
) -> None:
    """Answer tool call CALL of waiting task TASK: the task is queued again and resumes from
    its checkpoint. A call that is no longer awaited is refused (exit 1)."""
    try:
        result = read_json_arg(result_json, "result")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    tid = _id(task_id)
    actor = ctx.find_root().obj["actor"]
    task = run(ctx, lambda q: q.submit_tool_result(tid, call_id, result, actor=actor))
    if as_json:
        emit_json(task.to_json())
    else:
        click.echo(f"{task.id}  {task.state.value}  (result for {call_id} taken)")


@main.command()
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of events.")
@click.pass_context
def events(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show a task's audit events."""
    tid = _id(task_id)
    found = run(ctx, lambda q: q.events(tid))
    if as_json:
        emit_json([e.to_json() for e in found])
    else:
        event_rows(found)


def _id(value: str) -> Any:
    try:
        return parse_task_id(value, "id")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)


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


main.command("cancel", help="Cancel a task that has not ended.")(
    _person_action("cancel", "cancelled")
)


main.command(
    "approve",
    help="Release a task a guardrail holds for approval (approvers only; --actor says who).",
)(_person_action("approve", "approved", reason_required=True))
main.command("reject", help="Cancel a task a guardrail holds for approval (approvers only).")(
    _person_action("reject", "rejected", reason_required=True)
)


@main.group()
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
    print_page(page, as_json)


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


@main.command()
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


@main.command()
@click.argument("task_id", metavar="ID")
@click.option("--stream", type=click.Choice(["stdout", "stderr", "log"]), help="Only this stream.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of log records.")
@click.pass_context
def logs(ctx: click.Context, task_id: str, stream: str | None, as_json: bool) -> None:
    """Show the captured output of a task's attempts."""
    tid = _id(task_id)
    records = [r for r in run(ctx, lambda q: q.logs(tid)) if stream is None or r.stream == stream]
    if as_json:
        emit_json([r.to_json() for r in records])
        return
    for record in records:
        mark = " (truncated)" if record.truncated else ""
        click.echo(f"--- attempt {record.attempt} {record.stream}{mark} ---")
        click.echo(record.text.rstrip("\n"))


def _load_app(spec: str) -> Any:
    """``module:attribute`` naming a Queue or AsyncQueue with registered handlers."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput("must look like module:attribute", "app")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import {module_name}: {exc}", "app") from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise InvalidInput(f"{module_name} has no attribute {attribute!r}", "app") from None
    if not hasattr(app, "handlers"):
        raise InvalidInput(f"{spec} is not a Queue or AsyncQueue", "app")
    return app


def _run_worker(
    ctx: click.Context,
    *,
    concurrency: int | None,
    task_types: tuple[str, ...],
    agents: tuple[str, ...],
    worker_id: str | None,
    app: str | None,
    scheduler: bool,
    grace: float | None,
    until_idle: bool,
    api: tuple[str, int] | None = None,
) -> None:
    import signal

    _log_to_stderr()
    opts = ctx.find_root().obj
    types = [t.strip() for item in task_types for t in item.split(",") if t.strip()]
    try:
        source = _load_app(app) if app else None
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    db = opts["db"]
    if source is not None and db is None:
        db = source.url

    async def go(queue: AsyncQueue) -> None:
        if source is not None:
            queue.handlers.update(source.handlers)
            queue.tools.update(source.tools)
        worker = queue.worker(
            concurrency=concurrency,
            task_types=types or None,
            agents=list(agents) or None,
            worker_id=worker_id,
            run_scheduler=scheduler,
            grace_secs=grace,
        )
        loop = asyncio.get_running_loop()
        interrupts = 0
        server = None
        if api is not None:
            from .api.server import api_server, listen

            # The API's app opens the queue as it starts: open it first, so that a database
            # that cannot be used fails serve naming the cause, as it fails a worker.
            await until_reachable(queue.open, log_for("agentqueue.api"), "opening the database")
            sock = listen(*api)
            server = api_server(queue, *api, own_signals=False)
            serving = asyncio.create_task(server.serve([sock]), name="agentqueue-api")
            await _api_started(server, serving, sock, api[0])

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            worker.stop(grace_secs=0 if interrupts > 1 else None)
            if server is not None:
                server.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        if until_idle:
            worker.jobs.start(_stop_when_idle(queue, worker), "agentqueue-until-idle")
        try:
            await worker.run()
        finally:
            if server is not None:
                server.should_exit = True
                await serving

    async def _stop_when_idle(queue: AsyncQueue, worker: Any) -> None:
        quiet = 0
        await worker.started.wait()
        while True:
            await asyncio.sleep(0.5)
            try:
                left = await queue.work_left()
            except StoreUnavailable:  # the worker's own loops report the outage
                quiet = 0
                continue
            quiet = quiet + 1 if left == 0 else 0
            if quiet >= 2:
                worker.stop()
                return

    async def with_queue(q: AsyncQueue) -> None:
        await go(q)

    run_db(ctx, with_queue, db=db, one_shot=False)


async def _api_started(server: Any, serving: asyncio.Task[None], sock: Any, host: str) -> None:
    """Wait until the API serves; say where (the port chosen when 0 was asked)."""
    from .api.server import bound_port

    while not server.started:
        if serving.done():
            serving.result()
            raise AgentQueueError("the API stopped as it started")
        await asyncio.sleep(0.02)
    click.echo(f"API listening on http://{host}:{bound_port(sock)}/v1", err=True)


def _api_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--host", help="Address the API listens on (default [api] host, 127.0.0.1)."),
        click.option(
            "--port",
            type=click.IntRange(0, 65_535),
            help="Port of the API (default [api] port, 8077).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _api_address(ctx: click.Context, host: str | None, port: int | None) -> tuple[str, int]:
    from .config import load_settings

    opts = ctx.find_root().obj
    try:
        settings = load_settings(opts["config"] or None).api
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    return (host or settings.host, settings.port if port is None else port)


def _worker_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--concurrency", type=click.IntRange(1, 10_000), help="Slots in all."),
        click.option(
            "--task-types", multiple=True, help="Only these task types (comma list, repeatable)."
        ),
        click.option("--agent", "agents", multiple=True, help="Only this agent (repeatable)."),
        click.option("--id", "worker_id", help="Worker id in the audit log (default host-pid)."),
        click.option("--app", help="module:attribute of a Queue whose handlers to run."),
        click.option(
            "--scheduler/--no-scheduler", default=True, help="Run the scheduler steps too."
        ),
        click.option("--grace", type=float, help="Seconds running tasks get at shutdown."),
        click.option("--until-idle", is_flag=True, help="Exit once no work is left."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command()
@_worker_options
@click.pass_context
def worker(ctx: click.Context, /, **options: Any) -> None:
    """Run a worker: claim tasks and run them with handlers and agents until SIGTERM."""
    _run_worker(ctx, **options)


@main.command()
@_worker_options
@_api_options
@click.option("--no-api", is_flag=True, help="Do not serve the HTTP API.")
@click.pass_context
def serve(
    ctx: click.Context, /, host: str | None, port: int | None, no_api: bool, **options: Any
) -> None:
    """Run the scheduler, a worker and the HTTP API in one process (the embedded deployment)."""
    options["scheduler"] = True
    address = None if no_api else _api_address(ctx, host, port)
    _run_worker(ctx, api=address, **options)


@main.command("api")
@_api_options
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="API processes sharing the port; each has its own connections, token cache and "
    "per-token rate limits.",
)
@click.pass_context
def api_cmd(ctx: click.Context, host: str | None, port: int | None, workers: int) -> None:
    """Run the HTTP API alone (several API processes may share one PostgreSQL)."""
    import signal

    from .api.server import api_loop_factory, api_server, freeze_startup_heap, listen

    _log_to_stderr()
    address = _api_address(ctx, host, port)
    if workers > 1:
        _api_workers(ctx, address, workers)
        return

    async def go(queue: AsyncQueue) -> None:
        sock = listen(*address)
        await until_reachable(queue.open, log_for("agentqueue.api"), "opening the database")
        server = api_server(queue, *address, own_signals=False)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        serving = asyncio.create_task(server.serve([sock]), name="agentqueue-api")
        await _api_started(server, serving, sock, address[0])
        freeze_startup_heap()
        await serving

    run_db(ctx, go, one_shot=False, loop_factory=api_loop_factory())


def _api_workers(ctx: click.Context, address: tuple[str, int], workers: int) -> None:
    """``agentqueue api --workers N``: migrate (waiting for the database as a lone API
    process would), then serve from N processes that make their queue from the environment."""
    from .api.server import serve_workers

    async def migrated(queue: AsyncQueue) -> None:
        await until_reachable(queue.open, log_for("agentqueue.api"), "opening the database")

    run_db(ctx, migrated, one_shot=False)
    opts = ctx.find_root().obj
    for name, value in (
        ("AGENTQUEUE_DB", opts["db"]),
        ("AGENTQUEUE_CONFIG", opts["config"]),
        ("AGENTQUEUE_ACTOR", opts["actor"]),
    ):
        if value is not None:
            os.environ[name] = str(value)

    def listening(port: int) -> None:
        click.echo(
            f"API listening on http://{address[0]}:{port}/v1 ({workers} processes)", err=True
        )

    serve_workers(*address, workers, listening=listening)


def log_for(name: str) -> Any:
    """The logger of ``name``."""
    import logging

    return logging.getLogger(name)


@main.command()
@click.option("--id", "holder", help="This scheduler's name in the lease (default host-pid).")
@click.pass_context
def scheduler(ctx: click.Context, holder: str | None) -> None:
    """Run a scheduler alone: it competes for the leadership (one leads at a time, over every
    process sharing the database) and, while it leads, takes back lapsed leases, retries,
    settles dependencies, admits work under the limits, fires cron slots and purges dead
    letters. Workers run one by default; this is for deployments that run it apart."""
    import signal

    _log_to_stderr()

    async def go(queue: AsyncQueue) -> None:
        # run_scheduler waits for a database that is away at start (a misconfigured one
        # fails at once); a scheduler loop that dies ends it with LoopFailed: exit 1.
        job = asyncio.create_task(queue.run_scheduler(holder=holder))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, job.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await job

    run_db(ctx, go, one_shot=False)


@main.command("agents")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def agents_cmd(ctx: click.Context, as_json: bool) -> None:
    """The configured agents: what routing may give them, and their load against their cap."""
    loads = run(ctx, lambda q: q.agents())
    if as_json:
        emit_json([a.to_json() for a in loads])
        return
    table(
        ["AGENT", "TASK TYPES", "LABELS", "ADMITTED", "CAP"],
        [
            [a.name, ",".join(a.task_types), ",".join(a.labels), a.admitted, a.max_concurrent]
            for a in loads
        ],
    )


@main.command()
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


@main.command()
@click.argument("task_type", metavar="TYPE")
@click.pass_context
def resume(ctx: click.Context, task_type: str) -> None:
    """Resume task type TYPE after `pause`."""
    actor = ctx.find_root().obj["actor"]
    resumed = run(ctx, lambda q: q.resume(task_type, actor=actor))
    click.echo(f"resumed {task_type}" if resumed else f"{task_type} was not paused")


@main.group()
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
            f"added schedule {added.name} (tenant {added.tenant}); "
            f"first slot {_ago(added.next_at)} UTC"
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


@main.group()
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
    until = made.record.expires_at.isoformat() if made.record.expires_at else "never"
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
                t.expires_at.isoformat(timespec="seconds") if t.expires_at else "never",
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


@main.command()
@click.pass_context
def verify(ctx: click.Context) -> None:
    """Check every task's audit chain; exit 1 naming the first bad event."""
    report = run(ctx, lambda q: q.verify())
    if report.ok:
        click.echo(f"ok: {report.tasks} tasks, {report.events} events, every chain holds")
        return
    click.echo(f"BROKEN: {report.breaks[0]}", err=True)
    for extra in report.breaks[1:10]:
        click.echo(f"  also: {extra}", err=True)
    click.echo(f"{len(report.breaks)} broken chain(s) in {report.tasks} tasks", err=True)
    sys.exit(EXIT_ERROR)


from .bench.cli import bench  # noqa: E402  (kept apart: the benchmarks live in bench/)

main.add_command(bench)


if __name__ == "__main__":  # pragma: no cover
    main()
