"""Serving the API with uvicorn, alone (``agentqueue api``, in one process or several) or beside
a worker and scheduler in one event loop (``agentqueue serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.loops.auto import auto_loop_factory
from uvicorn.supervisors import Multiprocess

from ..domain.errors import AgentQueueError
from ..heap import freeze_startup_heap
from ..queue import AsyncQueue
from .app import create_app

log = logging.getLogger("agentqueue.api")


def api_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop uvicorn would choose itself (uvloop, installed with uvicorn[standard];
    else asyncio's), for a process that serves only the API: the CLI starts the loop, so
    uvicorn's ``loop`` setting never applies."""
    factory: Callable[[], asyncio.AbstractEventLoop] = auto_loop_factory(use_subprocess=False)
    return factory


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to its host process (``serve`` stops the worker
    and the API together on SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def api_server(
    queue: AsyncQueue,
    host: str,
    port: int,
    *,
    own_signals: bool = True,
    own_queue: bool = False,
    access_log: bool = False,
) -> uvicorn.Server:
    """A uvicorn server for the API over ``queue``; ``await server.serve([listen(...)])``
    runs it and ``server.should_exit = True`` stops it. With ``own_signals`` false the
    process's own handlers must set ``should_exit`` on SIGTERM."""
    config = uvicorn.Config(
        create_app(queue, own_queue=own_queue),
        host=host,
        port=port,
        log_config=None,  # the process's logging, as configured by the CLI
        access_log=access_log,
        server_header=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config) if own_signals else _Server(config)


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: any free one), bound before the server
    starts so that an address in use is an error naming it, not an exit from inside uvicorn."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise AgentQueueError(f"the API cannot listen on {host}:{port}: {exc}") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise AgentQueueError(f"the API could not listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` listens on."""
    return int(sock.getsockname()[1])


def app_from_env() -> FastAPI:
    """The app of one process of ``agentqueue api --workers N`` (uvicorn's factory): its queue
    is made from the environment that command sets for its processes (``AGENTQUEUE_DB``,
    ``AGENTQUEUE_CONFIG``, ``AGENTQUEUE_ACTOR``), opened as the app starts, closed as it
    stops."""
    queue = AsyncQueue(
        os.environ.get("AGENTQUEUE_DB") or None,
        config=os.environ.get("AGENTQUEUE_CONFIG") or None,
        actor=os.environ.get("AGENTQUEUE_ACTOR") or "api",
    )
    app = create_app(queue, own_queue=True)
    freeze_startup_heap()
    return app


def worker_logging(log_format: str = "text", log_level: str = "INFO") -> dict[str, Any]:
    """The CLI's log lines (stderr, its format and level, secrets masked) as a logging
    configuration, for uvicorn to set up in each worker process (they start afresh)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": "agentqueue.logsetup.make_formatter", "fmt": log_format}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "line",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": log_level, "handlers": ["stderr"]},
        "loggers": {"psycopg.pool": {"level": "ERROR"}},
    }


def serve_workers(
    host: str,
    port: int,
    workers: int,
    *,
    listening: Callable[[int], None] = lambda port: None,
    access_log: bool = False,
    log_format: str = "text",
    log_level: str = "INFO",
) -> None:
    """Serve the API from ``workers`` processes sharing one listening socket (uvicorn's
    supervisor, which restarts a process that dies) until SIGTERM or SIGINT. Each process
    builds its app with :func:`app_from_env`, so the caller sets that environment first; each
    has its own connections, token cache and per-token rate limits. ``listening`` is told the
    port once the socket is bound (the one chosen when ``port`` is 0)."""
    config = uvicorn.Config(
        f"{__name__}:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=worker_logging(log_format, log_level),
        access_log=access_log,
        server_header=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    sock = config.bind_socket()  # a port that is taken: logged, and exit 1
    # uvicorn binds here but each process listens only once it has started; listening now
    # makes the line below true: a connection made before then waits in the backlog.
    sock.listen(config.backlog)
    listening(int(sock.getsockname()[1]))
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()
