"""The live server against its own OpenAPI document (Schemathesis).

The document is read from the running server with an admin token, and every operation in it is
called with generated requests, schema-valid (positive) and not (negative), a bounded and fixed
number of examples each (derandomized, no shrinking, no example database), so a CI run is
repeatable and short. Every answer must be no 5xx, carry a status code the document lists for
the operation, the content type it names there, and a body its schema describes.

(Schemathesis' own lazy loader, ``schemathesis.pytest.from_fixture``, fails under pytest 9.2
with "'Function' object has no attribute '_nodeid'", so each operation is driven through its
Hypothesis strategy here: the operations are taken from the app at collection time and checked
against the live document.)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
import task_states
from app_routes import build_app
from http_server import ApiServer
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks
from schemathesis.specs.openapi import checks as openapi_checks

from agentqueue import Task

MAX_EXAMPLES = int(os.environ.get("AQ_SCHEMA_EXAMPLES", "8"))
"""Examples per operation and mode (set AQ_SCHEMA_EXAMPLES higher for a deeper run)."""
CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
]


DOCUMENT = build_app().openapi()
OPERATIONS = sorted(
    (method.upper(), path)
    for path, operations in DOCUMENT["paths"].items()
    for method in operations
)
"""(method, path) of every operation of the document, as the app builds it."""


def _negatable(method: str, path: str) -> bool:
    operation = DOCUMENT["paths"][path][method.lower()]
    plain_text = {"type": "string"}
    return "requestBody" in operation or any(
        {k: v for k, v in p["schema"].items() if k != "title"} != plain_text
        for p in operation.get("parameters", ())
    )


NEGATABLE = [(method, path) for method, path in OPERATIONS if _negatable(method, path)]
"""The operations a request can get wrong (the others take nothing, or only path segments
that any text fits)."""
ON_TASKS = [(method, path) for method, path in OPERATIONS if "{task_id}" in path]
"""The operations on one task, also run on tasks that exist, in every state."""


@pytest.fixture(scope="module")
def api_schema(server: ApiServer) -> Any:
    """The server's own document, read with an admin token, which every call sends too."""
    auth = {"Authorization": f"Bearer {server.admin_secret}"}
    schema = schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json", headers=auth)
    schema.config.update(base_url=server.url, headers=auth)
    return schema


def test_the_live_document_lists_the_operations_tested(api_schema: Any) -> None:
    """The operations parametrized below are exactly those the server documents."""
    live = sorted((op.method.upper(), op.path) for op in _operations(api_schema))
    assert live == OPERATIONS


def _operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


def _references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def test_every_reference_in_the_document_resolves(server: ApiServer) -> None:
    """Each ``$ref`` of the served document points at something in it (a client generator
    fails on one that does not)."""
    with server.client(server.admin_secret) as http:
        document = http.get("/v1/openapi.json").json()
    dangling = []
    for ref in set(_references(document)):
        node: Any = document
        for part in ref.removeprefix("#/").split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if not ref.startswith("#/") or node is None:
            dangling.append(ref)
    assert not dangling, f"references to nothing: {sorted(dangling)}"


@pytest.fixture(scope="module")
def seeded(server: ApiServer) -> list[Task]:
    """Tasks in every state a person or worker leaves one in (so that lists and answers about
    one task are held to the document too, not only the errors)."""

    async def make() -> list[Task]:
        async with server.queue() as q:
            makers = (
                task_states.queued, task_states.blocked, task_states.waiting,
                task_states.dead, task_states.completed, task_states.failed,
            )  # fmt: skip
            return [await make_one(q, "default") for make_one in makers]

    return asyncio.run(make())


SEEDED = "seeded"
"""Positive examples on the tasks of ``seeded``."""
NOT_BLOCKING = {"/v1/tasks/{task_id}": {"wait": 0}, "/v1/tasks/{task_id}/events": {"stream": False}}
"""Fixed query parameters for a task that has not ended (a wait or a stream would last until
it does)."""

CASES = (
    [(op, GenerationMode.POSITIVE.value) for op in OPERATIONS]
    + [(op, GenerationMode.NEGATIVE.value) for op in NEGATABLE]
    + [(op, SEEDED) for op in ON_TASKS]
)


def _strategy(op: Any, path: str, mode: str, seeded: list[Task]) -> Any:
    if mode != SEEDED:
        return op.as_strategy(generation_mode=GenerationMode(mode))
    strategies = []
    for task in seeded:
        fixed = {"task_id": str(task.id)}
        if "{call_id}" in path:
            fixed["call_id"] = task_states.CALL_ID
        query = None if task.terminal else NOT_BLOCKING.get(path)
        strategies.append(op.as_strategy(path_parameters=fixed, query=query))
    return st.one_of(strategies)


@pytest.mark.parametrize(
    ("operation", "mode"), CASES, ids=[f"{op[0]} {op[1]} {mode}" for op, mode in CASES]
)
def test_every_answer_conforms_to_the_document(
    api_schema: Any,
    server: ApiServer,
    seeded: list[Task],
    operation: tuple[str, str],
    mode: str,
) -> None:
    """No 5xx; the status code, content type and body are as documented."""
    method, path = operation
    op = api_schema[path][method]
    auth = {"Authorization": f"Bearer {server.admin_secret}"}

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_strategy(op, path, mode, seeded))
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=server.url, headers=auth, checks=CHECKS)

    run()
