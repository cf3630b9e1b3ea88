"""The API's route table, read from the app itself as a server builds it."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute

from agentqueue import AsyncQueue
from agentqueue.api.app import create_app
from agentqueue.config import Settings


def build_app() -> FastAPI:
    """The API app, as a server builds it (its queue is never opened here)."""
    return create_app(AsyncQueue("sqlite:///never-opened.db", settings=Settings()))


def served_routes(app: FastAPI) -> Iterator[tuple[str, BaseRoute]]:
    """(path, route) of every route the app serves, included routers walked as FastAPI walks
    them to route a request."""
    for context in iter_route_contexts(app.routes):
        path = context.path
        if path is not None:
            yield path, context.original_route


def v1_routes(app: FastAPI) -> dict[tuple[str, str], BaseRoute]:
    """Every route under /v1 by (method, path); HEAD answered by a GET route is left out."""
    found: dict[tuple[str, str], BaseRoute] = {}
    for path, route in served_routes(app):
        if not path.startswith("/v1/"):
            continue
        methods = getattr(route, "methods", None) or {"GET"}
        for method in sorted(set(methods) - {"HEAD"} or methods):
            found[(method, path)] = route
    return found
