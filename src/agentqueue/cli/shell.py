"""What every ``agentqueue`` command shares: running an action on the queue or on a server
(``run``, ``run_db``), errors and exit codes, output (tables, JSON) and input parsing."""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar

import click

from ..domain.errors import AgentQueueError, InvalidInput, StoreLocked, StoreUnavailable
from ..domain.limits import (
    MAX_INPUT_BYTES,
    JSONLimitError,
    loads_json,
    parse_json,
    read_bounded,
    time_problem,
    utf8_text,
)
from ..domain.priority import priority_name
from ..domain.task_state import TaskState
from ..ids import parse_task_id

if TYPE_CHECKING:  # loaded when a command runs: --help needs none of them (start-up time)
    import asyncio

    from ..client import AsyncClient
    from ..domain.models import Event, Task
    from ..queue import AsyncQueue
    from ..service.reads import TaskPage

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

QueueLike: TypeAlias = "AsyncQueue | AsyncClient"
"""What a one-shot command acts on: the database's queue, or a client of a server (``--api``);
the two have the same method names."""


def _default_actor() -> str:
    try:
        return os.environ.get("AGENTQUEUE_ACTOR") or getpass.getuser()
    except Exception:  # no user name on some containers
        return "cli"


PROGRESS_MIN = 1000
"""A run this long (tasks) shows progress on a terminal; a shorter one is over before a bar
would tell anything."""


@contextmanager
def progress(total: int, unit: str, what: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr while a long run (``total`` of at least PROGRESS_MIN) goes on,
    when stderr is a terminal; else None (a pipe or a file gets nothing). tqdm is loaded only
    then (start-up time)."""
    if total < PROGRESS_MIN or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm  # type: ignore[import-untyped]

    with tqdm(total=total, unit=unit, desc=what, file=sys.stderr, leave=False) as bar:
        yield bar.update


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
    import asyncio

    from ..client import AsyncClient

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
    import asyncio

    from ..queue import AsyncQueue

    async def go() -> T:
        queue = AsyncQueue(
            db or opts["db"],
            config=opts["config"],
            actor=opts["actor"],
            tenant=tenant,
            open_wait_secs=ONE_SHOT_WAIT_SECS if one_shot else LONG_RUNNING_OPEN_WAIT_SECS,
            # A long-running process writes SQLite from a process of its own while it is busy
            # and from a thread while it is quiet (README, Storage).
            sqlite_writer=None if one_shot else "auto",
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


def _log_to_stderr(ctx: click.Context) -> tuple[str, str]:
    """Log lines for the long-running commands (worker, serve, scheduler, api), on stderr:
    ``--log-format``, else ``[logging] format``; ``AGENTQUEUE_LOG_LEVEL``, else ``[logging]
    level``; secrets masked. A bad value exits 2 naming it. Returns the format and level."""
    from ..config import load_settings, plain
    from ..logsetup import check_level, configure

    opts = ctx.find_root().obj
    try:
        settings = load_settings(opts["config"] or None)
        fmt = opts.get("log_format") or settings.logging.format
        level = settings.logging.level
        if os.environ.get("AGENTQUEUE_LOG_LEVEL"):
            level = check_level(os.environ["AGENTQUEUE_LOG_LEVEL"], "AGENTQUEUE_LOG_LEVEL")
        configure(
            fmt,
            level,
            db_url=opts["db"] or settings.db,
            config_data=plain(settings),
        )
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    return fmt, level


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
    """A time as every table prints it: in UTC, saying so (``2026-11-30 17:23:58 UTC``)."""
    if when is None:
        return ""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


ERROR_WIDTH = 60
"""How much of a task's last error ``dlq list`` shows (on one line)."""


def task_rows(tasks: Sequence[Task], errors: bool = False) -> None:
    """The task table of ``list`` and ``dlq list`` (``errors``: with each task's last error,
    on one line, cut to ERROR_WIDTH)."""
    headers = ["id", "state", "pri", "type", "tenant", "retries", "title", "created"]
    rows = [
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
    ]
    if errors:
        headers.append("last error")
        for row, task in zip(rows, tasks, strict=True):
            row.append(_short(" ".join((task.error or "").split()), ERROR_WIDTH))
    table(headers, rows)


def print_page(
    page: TaskPage, as_json: bool, empty: str = "no tasks match", errors: bool = False
) -> None:
    """A page of tasks as a JSON array, or a table with the cursor of the next page (or the
    line ``empty`` when there is none)."""
    if as_json:
        emit_json([t.to_json() for t in page.items])
        return
    if not page.items:
        click.echo(empty)
        return
    task_rows(page.items, errors)
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
    """JSON text, or ``@path`` (``@-`` for stdin) holding JSON: read at most
    MAX_INPUT_BYTES (plus one, to refuse more), UTF-8, within the bounds of domain.limits."""
    if not value.startswith("@"):
        return loads_json(value, field)
    return loads_json(_read_input(value[1:], field), field)


def _read_input(path: str, field: str) -> str:
    """A file's (``-``: stdin's) text, at most MAX_INPUT_BYTES of it, which must be UTF-8."""
    try:
        if path == "-":
            data = read_bounded(sys.stdin.buffer, MAX_INPUT_BYTES, field)
        else:
            with open(path, "rb") as stream:
                data = read_bounded(stream, MAX_INPUT_BYTES, field)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}", field) from None
    return utf8_text(data, field)


_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")


def parse_when(value: str, field: str) -> datetime:
    """An ISO 8601 time (UTC if no offset) or ``+30s``/``+5m``/``+2h``/``+1d`` from now."""
    match = _RELATIVE.match(value.strip())
    if match:
        amount, unit = float(match.group(1)), match.group(2)
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        try:
            when = datetime.now(UTC) + timedelta(seconds=seconds)
        except (OverflowError, ValueError):
            raise InvalidInput(f"{value.strip()} is too far ahead", field) from None
    else:
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(
                "must be an ISO 8601 time (2026-05-01T09:00:00Z) or +30s/+5m/+2h/+1d", field
            ) from None
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
    problem = time_problem(when)
    if problem is not None:
        raise InvalidInput(problem, field)
    return when


def read_task_file(value: str) -> list[Any]:
    """Tasks from a JSON object, a JSON array, or JSON lines; ``-`` reads stdin."""
    text = _read_input(value, "file")
    stripped = text.strip()
    if not stripped:
        raise InvalidInput("holds no tasks", "file")
    try:
        parsed = parse_json(stripped)
        return parsed if isinstance(parsed, list) else [parsed]
    except JSONLimitError as exc:
        raise InvalidInput(str(exc), "file") from None
    except ValueError:
        pass
    items = []
    for number, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(parse_json(line))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"line {number} is not valid JSON ({exc.msg})", "file") from None
        except ValueError as exc:
            raise InvalidInput(f"line {number}: {exc}", "file") from None
    return items


def task_id_arg(value: str) -> Any:
    """Parse an ID argument (bad ids are bad input, exit 2)."""
    return parse_task_id(value, "id")


def _id(value: str) -> Any:
    try:
        return parse_task_id(value, "id")
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
