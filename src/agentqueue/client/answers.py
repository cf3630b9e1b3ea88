"""Reading the HTTP API's answers: a result from a good one, the local queue's error from a
problem-details one, and events from a server-sent event stream."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from ..domain.errors import (
    AgentQueueError,
    APIError,
    FieldProblem,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Refused,
    StoreMisconfigured,
    StoreUnavailable,
    Unauthenticated,
)
from ..domain.models import Event
from .calls import Call

R = TypeVar("R")
PROBLEM_FIELDS = ("detail", "title")


def _problem(response: httpx.Response) -> tuple[str, list[FieldProblem], str | None]:
    """The detail, field problems and error id of a problem-details answer."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"HTTP {response.status_code} {response.reason_phrase}", [], None
    detail = next((str(body[k]) for k in PROBLEM_FIELDS if body.get(k)), "")
    problems = [
        FieldProblem(str(e.get("field", "")), str(e.get("message", "")))
        for e in body.get("errors") or ()
        if isinstance(e, dict)
    ]
    error_id = body.get("error_id")
    return (
        detail or f"HTTP {response.status_code}",
        problems,
        error_id if isinstance(error_id, str) else None,
    )


def error_for(response: httpx.Response) -> AgentQueueError:
    """The error the local queue would raise for what this failed answer says."""
    status = response.status_code
    detail, problems, error_id = _problem(response)
    if status == 422:
        return InvalidInput(problems or [FieldProblem("", detail)])
    if status == 413:
        return InvalidInput(detail, "body")
    if status == 401:
        return Unauthenticated(detail)
    if status == 403:
        return Forbidden(detail)
    if status == 404:
        return NotFound(detail)
    if status == 409:
        return Refused(detail)
    if status == 429:
        return RateLimited(_retry_after(response), detail)
    if status == 503:
        if "retry-after" in response.headers:
            return StoreUnavailable(detail)
        return StoreMisconfigured(detail)
    return APIError(status, detail, error_id)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def answer(call: Call[R], response: httpx.Response) -> R:
    """The result of ``call`` from its answer; the mapped error if it failed."""
    if not response.is_success:
        raise error_for(response)
    try:
        return call.decode(response.json())
    except (ValueError, KeyError, TypeError) as exc:
        raise APIError(
            response.status_code,
            f"{call.method} {call.path}: the answer is not what this client reads "
            f"({type(exc).__name__}: {exc}); is the server an agentqueue API of this version?",
        ) from None


class EventStream:
    """Server-sent events, fed line by line, as Events."""

    def __init__(self, decode: Callable[[Any], Event]) -> None:
        self.decode = decode
        self.data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if any."""
        if not line:
            if not self.data:
                return None
            text, self.data = "\n".join(self.data), []
            return self.decode(json.loads(text))
        name, _, value = line.partition(":")
        if name == "data":
            self.data.append(value.removeprefix(" "))
        return None  # comments (keep-alives), ids and event names carry nothing more
