"""The long-running commands: worker, serve, api, scheduler."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..domain.errors import AgentQueueError, InvalidInput, StoreUnavailable
from .shell import (
    EXIT_BAD_INPUT,
    _log_to_stderr,
    fail,
    run_db,
)

if TYPE_CHECKING:  # loaded when the command runs (start-up time)
    import asyncio

    from ..domain.waiting import Scope, Survey
    from ..queue import AsyncQueue

API_LOG = logging.getLogger("agentqueue.api")
WORKER_LOG = logging.getLogger("agentqueue.worker")


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


def _origin(ctx: click.Context, app: str | None) -> str:
    """Where a worker's database URL and settings came from, for its start line: the option
    or variable that won, and a config file's ``db`` that lost to the app's own URL."""
    from click.core import ParameterSource

    from ..config import load_settings

    root = ctx.find_root()
    opts = root.obj
    config = opts["config"]
    named = None
    if config:
        by_flag = root.get_parameter_source("config") is ParameterSource.COMMANDLINE
        named = f"--config {config}" if by_flag else f"AGENTQUEUE_CONFIG={config}"
    config_db = load_settings(config).db if config else None
    if opts["db"]:
        by_flag = root.get_parameter_source("db") is ParameterSource.COMMANDLINE
        database = "database from --db" if by_flag else "database from AGENTQUEUE_DB"
    elif app:
        database = f"database from the URL of --app {app}"
        if config_db:
            database += f" (not the db in {named})"
    elif config_db:
        database = f"database from db in {named}"
    else:
        database = "database: the default"
    settings = f"settings from {named}" if named else "settings: defaults, no config file"
    return f"{database}; {settings}"


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
    metrics_port: int | None,
    metrics_host: str,
    api: tuple[str, int] | None = None,
) -> None:
    import asyncio
    import signal

    from ..supervise import until_reachable

    _log_to_stderr(ctx)
    opts = ctx.find_root().obj
    types = [t.strip() for item in task_types for t in item.split(",") if t.strip()]
    try:
        source = _load_app(app) if app else None
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    db = opts["db"]
    if source is not None and db is None:
        db = source.url
    try:
        origin = _origin(ctx, app)
    except InvalidInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    async def go(queue: AsyncQueue) -> None:
        from ..service.audit import warn_if_unkeyed

        warn_if_unkeyed()
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
            deliver_before_exit=until_idle,
            origin=origin,
        )
        loop = asyncio.get_running_loop()
        interrupts = 0
        server = None
        exporter = None
        if metrics_port is not None:
            from ..worker.exporter import serve_worker_metrics

            try:
                exporter, bound = serve_worker_metrics(worker, metrics_host, metrics_port)
            except OSError as exc:
                fail(f"--metrics-port: cannot listen on {metrics_host}:{metrics_port}: {exc}",
                     EXIT_BAD_INPUT)  # fmt: skip
            click.echo(f"metrics listening on http://{metrics_host}:{bound}/metrics", err=True)
        if api is not None:
            from ..api.server import api_server, listen

            # The API's app opens the queue as it starts: open it first, so that a database
            # that cannot be used fails serve naming the cause, as it fails a worker.
            await until_reachable(queue.open, API_LOG, "opening the database")
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
        worker.jobs.start(_freeze_once_started(worker), "agentqueue-freeze")
        try:
            await worker.run()
        finally:
            if exporter is not None:
                exporter.shutdown()
            if server is not None:
                server.should_exit = True
                await serving

    async def _freeze_once_started(worker: Any) -> None:
        from ..heap import freeze_startup_heap

        # Built by now: the store, the executors, the scheduler. What the worker allocates
        # from here on (claimed rows, attempts) comes and goes.
        await worker.started.wait()
        freeze_startup_heap()
        if WORKER_LOG.isEnabledFor(logging.DEBUG):  # the count walks all that was frozen
            WORKER_LOG.debug("startup heap frozen: %d objects", gc.get_freeze_count())

    async def _stop_when_idle(queue: AsyncQueue, worker: Any) -> None:
        await worker.started.wait()
        scope = _scope(queue, worker)
        quiet = 0
        while True:
            await asyncio.sleep(IDLE_POLL_SECS)
            try:
                left = await queue.left_for(scope)
            except StoreUnavailable:  # the worker's own loops report the outage
                quiet = 0
                continue
            # Twice in a row: a task between two states (an outcome being written, a claim
            # under way) is seen in the one or the other.
            quiet = quiet + 1 if left is not None else 0
            if left is not None and quiet >= 2:
                _report_left(worker.id, left)
                worker.stop()
                return

    async def with_queue(q: AsyncQueue) -> None:
        await go(q)

    run_db(ctx, with_queue, db=db, one_shot=False)


IDLE_POLL_SECS = 0.5
"""How often ``--until-idle`` asks whether anything left is work for this process."""


def _scope(queue: AsyncQueue, worker: Any) -> Scope:
    """What this process runs: its executors' task types and agents, its tools, and the task
    types its options left out."""
    serves = tuple((frozenset(e.task_types), frozenset(e.agents)) for e in worker.executors)
    from ..domain.waiting import Scope

    every = set(queue.handlers)
    for agent in queue.settings.agents.values():
        every.update(agent.task_types)
    served = {t for types, _ in serves for t in types}
    return Scope(worker.id, serves, frozenset(worker.tools), frozenset(every - served))


def _report_left(worker_id: str, left: Survey) -> None:
    """Say, as the process stops, what is left that it could not run, and why."""
    n = left.total_left
    if n == 0:
        WORKER_LOG.info("worker %s idle: no tasks left", worker_id)
        return
    WORKER_LOG.info(
        "worker %s idle: %d task%s left that it cannot run (`agentqueue show ID` says more):",
        worker_id,
        n,
        "s" if n != 1 else "",
    )
    for line in left.lines():
        WORKER_LOG.info("%s", line)


async def _api_started(server: Any, serving: asyncio.Task[None], sock: Any, host: str) -> None:
    """Wait until the API serves; say where (the port chosen when 0 was asked)."""
    import asyncio

    from ..api.server import bound_port

    while not server.started:
        if serving.done():
            serving.result()
            raise AgentQueueError("the API stopped as it started")
        await asyncio.sleep(0.02)
    API_LOG.info("API listening on http://%s:%d/v1", host, bound_port(sock))


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
    from ..config import load_settings

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
        click.option(
            "--until-idle",
            is_flag=True,
            help="Exit once nothing left can be run by this process (saying what is left and why).",
        ),
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65_535),
            help="Serve this process's own Prometheus metrics on this port (0: any free one).",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="Address of --metrics-port.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command()
@_worker_options
@click.pass_context
def worker(ctx: click.Context, /, **options: Any) -> None:
    """Run a worker: claim tasks and run them with handlers and agents until SIGTERM."""
    _run_worker(ctx, **options)


@click.command()
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


@click.command("api")
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
    import asyncio
    import signal

    from ..api.server import api_loop_factory, api_server, listen
    from ..heap import freeze_startup_heap
    from ..supervise import until_reachable

    log_format, log_level = _log_to_stderr(ctx)
    address = _api_address(ctx, host, port)
    if workers > 1:
        _api_workers(ctx, address, workers, log_format, log_level)
        return

    async def go(queue: AsyncQueue) -> None:
        sock = listen(*address)
        await until_reachable(queue.open, API_LOG, "opening the database")
        server = api_server(queue, *address, own_signals=False)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        serving = asyncio.create_task(server.serve([sock]), name="agentqueue-api")
        await _api_started(server, serving, sock, address[0])
        freeze_startup_heap()
        await serving

    run_db(ctx, go, one_shot=False, loop_factory=api_loop_factory())


def _api_workers(
    ctx: click.Context, address: tuple[str, int], workers: int, log_format: str, log_level: str
) -> None:
    """``agentqueue api --workers N``: migrate (waiting for the database as a lone API
    process would), then serve from N processes that make their queue from the environment."""
    from ..api.server import serve_workers
    from ..supervise import until_reachable

    async def migrated(queue: AsyncQueue) -> None:
        await until_reachable(queue.open, API_LOG, "opening the database")

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

    serve_workers(
        *address, workers, listening=listening, log_format=log_format, log_level=log_level
    )


@click.command()
@click.option("--id", "holder", help="This scheduler's name in the lease (default host-pid).")
@click.pass_context
def scheduler(ctx: click.Context, holder: str | None) -> None:
    """Run a scheduler alone: it competes for the leadership (one leads at a time, over every
    process sharing the database) and, while it leads, takes back lapsed leases, retries,
    settles dependencies, admits work under the limits, fires cron slots and purges dead
    letters. Workers run one by default; this is for deployments that run it apart."""
    import asyncio
    import signal

    _log_to_stderr(ctx)

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


COMMANDS = (
    worker,
    serve,
    api_cmd,
    scheduler,
)
"""The commands this module adds to ``agentqueue``."""
