"""Serving the API with uvicorn, alone (``agentqueue api``) or beside a worker and scheduler in
one event loop (``agentqueue serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

import uvicorn
from uvicorn.loops.auto import auto_loop_factory

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
    """A uvicorn server for the API over ``queue``; ``await server.serve()`` runs it and
    ``server.should_exit = True`` stops it."""
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
