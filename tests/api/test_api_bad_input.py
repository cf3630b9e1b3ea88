"""Bad input over HTTP is a 422 naming the field (SPEC section 5), never a 500 or a database's
words: the cases Schemathesis and the probing around it found answered otherwise."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import task_states
from http_server import ApiServer

NUL = "a\x00b"


def _problem(answer: Any, field: str) -> str:
    assert answer.status_code == 422, answer.text[:300]
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert [e["field"] for e in body["errors"]] == [field], body
    return str(body["errors"][0]["message"])


@pytest.mark.parametrize(
    ("method", "path", "params", "field"),
    [
        ("GET", "/v1/tasks", {"tenant": NUL}, "tenant"),
        ("GET", "/v1/tasks", {"source": ["api", NUL]}, "source"),
        ("GET", "/v1/schedules", {"tenant": NUL}, "tenant"),
        ("DELETE", "/v1/schedules/x%00y", {}, "name"),
        ("POST", "/v1/tokens/x%00y/revoke", {}, "name"),
        ("POST", "/v1/resume/x%00y", {}, "task_type"),
    ],
)
def test_a_parameter_with_a_nul_character_is_refused_naming_it(
    server: ApiServer, method: str, path: str, params: dict[str, Any], field: str
) -> None:
    """PostgreSQL cannot hold the NUL character even in a filter; SQLite could: both answer
    422 naming the parameter. Without a token it is 401 all the same."""
    with server.client(server.admin_secret) as http:
        message = _problem(http.request(method, path, params=params), field)
    assert "NUL" in message
    with server.client() as anonymous:
        assert anonymous.request(method, path, params=params).status_code == 401


def test_a_reason_with_a_nul_character_is_refused_and_nothing_changes(
    server: ApiServer,
) -> None:
    """Cancel, the dead-letter actions, approve, reject and pause: 422 naming reason; the task
    stays as it was."""

    async def make() -> tuple[str, str, str]:
        async with server.queue() as q:
            queued = await task_states.queued(q, "default")
            dead = await task_states.dead(q, "default")
            held = await task_states.blocked(q, "default")
            return str(queued.id), str(dead.id), str(held.id)

    queued, dead, held = asyncio.run(make())
    reason = {"reason": NUL}
    with server.client(server.admin_secret) as http:
        calls = [
            (f"/v1/tasks/{queued}/cancel", queued, "queued"),
            (f"/v1/dlq/{dead}/review", dead, "dead_letter"),
            (f"/v1/dlq/{dead}/requeue", dead, "dead_letter"),
            (f"/v1/dlq/{dead}/archive", dead, "dead_letter"),
            (f"/v1/tasks/{held}/approve", held, "blocked"),
            (f"/v1/tasks/{held}/reject", held, "blocked"),
        ]
        for path, task_id, state in calls:
            _problem(http.post(path, json=reason), "reason")
            assert http.get(f"/v1/tasks/{task_id}").json()["state"] == state, path
        _problem(http.post("/v1/pause/nul-reason", json=reason), "reason")
        assert "nul-reason" not in [p["task_type"] for p in http.get("/v1/pause").json()]


@pytest.mark.parametrize("path", ["/v1/tasks", "/v1/dlq"])
@pytest.mark.parametrize("cursor", ["9" * 30, str(2**63), "-" + "9" * 30, "next"])
def test_a_cursor_that_list_never_gave_is_refused_naming_it(
    server: ApiServer, path: str, cursor: str
) -> None:
    """Past the databases' integer range, negative, or not a number at all."""
    with server.client(server.admin_secret) as http:
        _problem(http.get(path, params={"cursor": cursor}), "cursor")


def test_a_token_lifetime_past_the_year_9999_is_refused(server: ApiServer) -> None:
    """``expires`` is named by the API and by the CLI (exit 2), and no token is made."""
    name = f"forever-{uuid.uuid4().hex[:6]}"
    with server.client(server.admin_secret) as http:
        body = {"name": name, "role": "submitter", "expires": "999999w"}
        _problem(http.post("/v1/tokens", json=body), "expires")
    done = server.cli("tokens", "create", "--name", name, "--role", "submitter",
                      "--expires", "999999w", check=False)  # fmt: skip
    assert done.returncode == 2 and "expires" in done.stderr, done.stderr
    assert name not in server.cli("tokens", "list").stdout


@pytest.mark.parametrize("depth", [513, 950, 100_000])
@pytest.mark.parametrize("path", ["/v1/tasks", "/v1/tasks/bulk", "/v1/schedules"])
def test_a_body_nested_too_deeply_is_refused_naming_body(
    server: ApiServer, path: str, depth: int
) -> None:
    """Past 512 levels of arrays and objects: 422 naming body (it was a 500, from the JSON
    decoder's recursion or from a later step)."""
    nested = "[" * depth + "]" * depth
    task = '{"title": "deep", "task_type": "docs", "payload": {"a": ' + nested + "}}"
    body = {
        "/v1/tasks": task,
        "/v1/tasks/bulk": '{"tasks": [' + task + "]}",
        "/v1/schedules": '{"name": "deep", "cron": "0 2 * * *", "task": ' + task + "}",
    }[path]
    with server.client(server.admin_secret) as http:
        json_type = {"Content-Type": "application/json"}
        answer = http.post(path, content=body.encode(), headers=json_type)
        assert "512" in _problem(answer, "body")


def test_a_body_nested_within_the_limit_is_taken(server: ApiServer) -> None:
    """A payload 500 levels deep is stored and read back whole."""
    payload: Any = 1
    for _ in range(499):
        payload = [payload]
    with server.client(server.admin_secret) as http:
        made = http.post("/v1/tasks", json={"title": "deep", "task_type": "docs",
                                            "payload": {"a": payload}})  # fmt: skip
        assert made.status_code == 201, made.text[:300]
        again = http.get(f"/v1/tasks/{made.json()['id']}").json()
    assert again["payload"] == {"a": payload}
