"""A submit body over a bound of domain.limits is a 4xx problem (application/problem+json)
naming what is wrong, never a 500, and writes nothing: nesting deeper than 512, a whole number
of more than 100 digits, a number out of range, NaN, a NUL character in any text field, a
run_after past the calendar, and a body over [api] max_body_bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from http_server import ApiServer

DEEP = "[" * 10_000 + "]" * 10_000
HUGE = "1" * 5_000


def _body(payload_json: str = "{}", **fields: str) -> bytes:
    extra = "".join(f', "{k}": {v}' for k, v in fields.items())
    return f'{{"title": "t", "task_type": "bugfix", "payload": {payload_json}{extra}}}'.encode()


@pytest.mark.parametrize(
    ("body", "status", "field", "words"),
    [
        (_body(f'{{"a": {DEEP}}}'), 422, "body", "nested more than 512 levels deep"),
        (_body(f'{{"n": {HUGE}}}'), 422, "body", "5000 digits"),
        (_body(f'{{"n": -{"9" * 101}}}'), 422, "body", "101 digits"),
        (_body('{"n": 1e999}'), 422, "body", "out of range"),
        (_body('{"n": NaN}'), 422, "body", "not valid JSON"),
        (b'{"title": "t", "task_type": "bugfix", "payload": {"a": "\xff"}}', 422, "body", ""),
        (_body('{"a": ["ok", "x\\u0000"]}'), 422, "payload", "a[1]: contains the NUL"),
        (_body('{"k\\u0000": 1}'), 422, "payload", "contains the NUL"),
        (b'{"title": "t\\u0000", "task_type": "bugfix"}', 422, "title", "contains the NUL"),
        (_body(idempotency_key='"k\\u0000"'), 422, "idempotency_key", "contains the NUL"),
        (_body(labels='["x\\u0000"]'), 422, "labels", ""),
        (_body(source='"issue"', source_id='"o/r#1\\u0000"'), 422, "source_id", "NUL"),
        (_body(run_after='"10000-01-01T00:00:00Z"'), 422, "run_after", ""),
        (_body(run_after='"9999-12-31T23:00:00-05:00"'), 422, "run_after", "9999"),
    ],
    ids=[
        "deep-10000",
        "int-5000-digits",
        "int-101-digits",
        "1e999",
        "NaN",
        "not-utf8",
        "nul-payload-string",
        "nul-payload-key",
        "nul-title",
        "nul-idempotency-key",
        "nul-label",
        "nul-source-id",
        "year-10000",
        "year-9999-behind-utc",
    ],
)
def test_a_submit_over_a_bound_is_a_problem_naming_it_and_writes_nothing(
    server: ApiServer, body: bytes, status: int, field: str, words: str
) -> None:
    """Each body gets its 422 problem naming the field (``body`` when it cannot be parsed
    within the bounds; a 5,000-digit number was a 500) and no task is written."""
    before = _count(server)
    with server.client(server.admin_secret) as http:
        answer = http.post("/v1/tasks", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text[:400]
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert [e["field"] for e in problem["errors"]] == [field], problem
    assert words in problem["errors"][0]["message"], problem
    assert _count(server) == before


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(server: ApiServer) -> None:
    """A body over [api] max_body_bytes (8 MiB here), sent without a Content-Length so the
    server must count as it reads: 413, nothing written."""
    before = _count(server)

    def chunks() -> Any:
        yield b'{"title": "t", "task_type": "bugfix", "payload": {"a": "'
        for _ in range(9 * 1024):
            yield b"x" * 1024
        yield b'"}}'

    with server.client(server.admin_secret) as http:
        answer = http.post(
            "/v1/tasks", content=chunks(), headers={"Content-Type": "application/json"}
        )
    assert answer.status_code == 413, answer.text[:300]
    assert answer.headers["content-type"] == "application/problem+json"
    assert _count(server) == before


def _count(server: ApiServer) -> int:
    async def go() -> int:
        async with server.queue() as q:
            return len((await q.list(limit=1000)).items)

    return asyncio.run(go())
