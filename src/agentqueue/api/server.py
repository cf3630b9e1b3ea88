"""Serving the API with uvicorn, alone (``agentqueue api``) or beside a worker and scheduler in
one event loop (``agentqueue serve``)."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from ..domain.errors import AgentQueueError
from ..queue import AsyncQueue
from .app import create_app

log = logging.getLogger("agentqueue.api")


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
