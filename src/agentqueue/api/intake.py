"""``POST /v1/intake/github``: GitHub webhook deliveries (R18), authenticated by their
``X-Hub-Signature-256``, not by a token. A shell over ``service.intake.receive``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..domain import access
from ..service import intake
from ..service.runtime import Runtime
from .auth import guarded
from .problems import SIGNATURE_CHALLENGE, problem

router = APIRouter(prefix="/v1")

_ANSWER = {"type": "object", "additionalProperties": True}
_PROBLEM: dict[str, Any] = {"content": {"application/problem+json": {}}}


@router.post(
    "/intake/github",
    summary="Receive a GitHub webhook delivery",
    response_model=None,
    responses={
        200: {
            "description": "Done (``tasks`` says what), a ping's pong, or a redelivery "
            "(``duplicate`` true, the first answer repeated)",
            "content": {"application/json": {"schema": _ANSWER}},
        },
        202: {
            "description": "Verified but ignored: ``ignored`` says why",
            "content": {"application/json": {"schema": _ANSWER}},
        },
        400: {
            "description": "Malformed: not JSON, a field missing or of the wrong type",
            **_PROBLEM,
        },
        401: {"description": "X-Hub-Signature-256 missing or not verified", **_PROBLEM},
        413: {"description": "Over [api] max_body_bytes", **_PROBLEM},
        422: {"description": "The task it asks for is refused", **_PROBLEM},
    },
    openapi_extra={
        **guarded(access.GITHUB_WEBHOOK)["openapi_extra"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ANSWER}}},
    },
)
async def github_delivery(request: Request) -> JSONResponse:
    """One delivery of a repository's (or organization's) webhook, content type
    application/json. See README "From GitHub" for the rules that turn it into tasks."""
    rt = request.app.state.runtime
    assert isinstance(rt, Runtime)
    body = await request.body()
    answer = await intake.receive(rt, request.headers, body)
    if answer.problem:
        headers = {"WWW-Authenticate": SIGNATURE_CHALLENGE} if answer.status == 401 else None
        return problem(
            answer.status, answer.body["detail"], errors=list(answer.errors), headers=headers
        )
    return JSONResponse(answer.body, status_code=answer.status)
