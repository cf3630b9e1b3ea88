"""Errors as RFC 9457 problem details, with the words the CLI uses.

Every error a client can cause names its field (``tasks[3].priority``) in ``errors``; nothing
else of the server (no traceback, no secret) reaches the client. An unexpected error is answered
500 with an ``error_id`` that the server's log carries beside the traceback.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..domain.errors import (
    AgentQueueError,
    Conflict,
    FieldProblem,
    Forbidden,
    InvalidInput,
    NotFound,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
    TransitionRefused,
    Unauthenticated,
)

log = logging.getLogger("agentqueue.api")

PROBLEM_TYPE = "application/problem+json"
AUTH_CHALLENGE = 'Bearer realm="agentqueue"'
SIGNATURE_CHALLENGE = 'HMAC-SHA256 realm="agentqueue", header="X-Hub-Signature-256"'
"""The challenge of a webhook route, which takes a signed body instead of a token."""

TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Invalid input",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


def problem(
    status: int,
    detail: str,
    *,
    errors: list[FieldProblem] | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem details response."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = [{"field": p.field, "message": p.message} for p in errors]
    body.update(extra)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_TYPE)


def unauthorized(detail: str) -> JSONResponse:
    """401 with the challenge a client needs to know a token is wanted."""
    return problem(401, detail, headers={"WWW-Authenticate": AUTH_CHALLENGE})


def from_error(exc: AgentQueueError) -> JSONResponse:
    """The answer to an error raised on purpose."""
    if isinstance(exc, InvalidInput):
        return problem(422, str(exc), errors=exc.problems)
    if isinstance(exc, Unauthenticated):
        return unauthorized(str(exc))
    if isinstance(exc, NotFound):
        return problem(404, str(exc))
    if isinstance(exc, Forbidden):
        return problem(403, str(exc))
    if isinstance(exc, TransitionRefused | Conflict):
        return problem(409, str(exc))
    if isinstance(exc, StoreUnavailable):
        return problem(503, f"the database is unavailable: {exc}", headers={"Retry-After": "1"})
    if isinstance(exc, StoreMisconfigured):
        return problem(503, f"the database cannot be used: {exc}")
    return problem(400, str(exc))


def _field(loc: tuple[Any, ...]) -> str:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return text.lstrip(".")


def validation_problems(exc: RequestValidationError) -> list[FieldProblem]:
    """FastAPI's validation errors as field problems (query and path parameters)."""
    out = []
    for err in exc.errors():
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            message = "required"
        out.append(FieldProblem(_field(tuple(err.get("loc", ()))), message))
    return out


def unexpected(exc: AgentQueueError) -> bool:
    """Whether the error is the server's, not the client's: the database answered with an
    error nobody foresaw (neither a passing outage nor a misconfiguration)."""
    return isinstance(exc, StoreError) and not isinstance(
        exc, StoreUnavailable | StoreMisconfigured
    )


async def on_agentqueue_error(request: Request, exc: Exception) -> JSONResponse:
    """Handler for AgentQueueError: an unexpected one is a 500 with an error id (its message,
    the database's words, goes to the log only)."""
    assert isinstance(exc, AgentQueueError)
    if unexpected(exc):
        return internal_error(exc, f"{request.method} {request.url.path}")
    return from_error(exc)


async def on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """Handler for FastAPI's request validation."""
    assert isinstance(exc, RequestValidationError)
    problems = validation_problems(exc)
    return problem(422, "; ".join(str(p) for p in problems), errors=problems)


async def on_http_error(_request: Request, exc: Exception) -> JSONResponse:
    """Handler for Starlette's HTTP errors (no such route, method not allowed)."""
    assert isinstance(exc, StarletteHTTPException)
    return problem(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))


def internal_error(exc: BaseException, where: str) -> JSONResponse:
    """Log an unexpected error with a new id (and its traceback); answer 500 with the id."""
    error_id = uuid.uuid4().hex[:16]
    log.error("error %s in %s: %s", error_id, where, type(exc).__name__, exc_info=exc)
    return problem(
        500, f"unexpected error; quote error id {error_id} to the operator", error_id=error_id
    )
