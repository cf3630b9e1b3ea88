"""The ASGI app: FastAPI over one queue's runtime.

``create_app(queue)`` builds it; ``agentqueue serve`` and ``agentqueue api`` serve it with
uvicorn. The dashboard is served at ``/`` (``agentqueue.dashboard``). Only ``/healthz`` and
``/readyz`` (and the dashboard's login page and assets) answer without a token: the OpenAPI document
(``/v1/openapi.json``) and its page (``/v1/docs``, which carries the document in itself) take
any valid token.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..dashboard.routes import install as install_dashboard
from ..domain import access
from ..domain.errors import AgentQueueError, RateLimited
from ..queue import AsyncQueue
from ..service.health import readiness
from ..service.metrics import CONTENT_TYPE, Scraper
from . import models
from .auth import Authenticator, RateLimiter, guarded, retry_after, route_policy
from .intake import router as intake_router
from .middleware import BodyLimit, LastResort
from .problems import on_agentqueue_error, on_http_error, on_validation_error, problem
from .routes import router
from .submitter import Submitter
from .watch import TaskWatcher


class UndeclaredPolicy(RuntimeError):
    """A route was added without declaring who may call it."""


def check_policies(app: FastAPI) -> None:
    """Every route of the app declares a policy; raise naming the first that does not.

    The routes of included routers are walked as FastAPI walks them to serve a request:
    ``app.routes`` holds an included router as one entry, not its routes."""
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute) and route_policy(route) is None:
            methods = ",".join(sorted(route.methods or ()))
            raise UndeclaredPolicy(f"route {methods} {context.path} declares no policy")


async def _rate_limited(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimited)
    return problem(429, str(exc), headers={"Retry-After": retry_after(exc)})


def create_app(queue: AsyncQueue, *, own_queue: bool = False) -> FastAPI:
    """The API over ``queue`` (opened when the app starts; closed when it stops if
    ``own_queue``)."""
    settings = queue.settings.api

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = await queue.runtime()
        app.state.runtime = rt
        app.state.auth = Authenticator(rt, settings.token_cache_secs)
        app.state.limiter = RateLimiter(settings.requests_per_minute, settings.burst)
        app.state.submitter = Submitter(rt)
        app.state.scraper = Scraper(rt)
        app.state.watcher = TaskWatcher(rt)
        app.state.watcher.start()
        try:
            yield
        finally:
            await app.state.watcher.stop()
            if own_queue:
                await queue.close()

    app = FastAPI(
        title="agentqueue",
        version=__version__,
        description="A durable task queue and scheduler for AI-agent work. Every route but "
        "/healthz and /readyz takes `Authorization: Bearer <token>`.",
        # FastAPI's own document and docs routes answer without a token; they are added
        # below as guarded routes instead.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.add_exception_handler(RateLimited, _rate_limited)
    app.add_exception_handler(AgentQueueError, on_agentqueue_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)

    @app.get(
        "/healthz",
        summary="The process is up",
        response_model=models.HealthOut,
        **guarded(access.PUBLIC),
    )
    async def healthz() -> dict[str, Any]:
        """Answers while the process runs (no token, no database)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="The database answers and its schema is current",
        response_model=models.HealthOut,
        responses={503: {"model": models.HealthOut}},
        **guarded(access.PUBLIC),
    )
    async def readyz(request: Request) -> Any:
        """200 when the database answers and its schema is this release's; else 503 saying
        what is wrong (no token)."""
        wrong = await readiness(request.app.state.runtime)
        if wrong is None:
            return {"status": "ready"}
        return JSONResponse({"status": "unavailable", "detail": wrong}, status_code=503)

    @app.get(
        "/metrics",
        summary="Prometheus metrics of the whole queue",
        response_class=Response,
        include_in_schema=False,  # the Prometheus text format, not a JSON operation
        **guarded(access.EVERY_TENANT_OPERATOR),
    )
    async def metrics(request: Request) -> Response:
        """The queue's metrics in the Prometheus text format, as every process sharing the
        database sees them (an operator token covering every tenant)."""
        body = await request.app.state.scraper.scrape()
        return Response(body, media_type=CONTENT_TYPE)

    @app.get("/v1/openapi.json", include_in_schema=False, **guarded(access.ANY_TOKEN))
    async def openapi_document() -> JSONResponse:
        """The OpenAPI document of every route."""
        return JSONResponse(app.openapi())

    @app.get("/v1/docs", include_in_schema=False, **guarded(access.ANY_TOKEN))
    async def docs() -> HTMLResponse:
        """The interactive documentation, with the document in the page (a browser would
        fetch the document without the token)."""
        return get_swagger_ui_html(
            openapi_url="/v1/openapi.json",
            title="agentqueue API",
            swagger_ui_parameters={"spec": app.openapi()},
        )

    app.include_router(router)
    app.include_router(intake_router)
    install_dashboard(app)
    check_policies(app)
    app.add_middleware(LastResort)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app
