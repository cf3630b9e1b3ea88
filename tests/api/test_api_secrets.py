"""Token secrets appear once, in the answer that makes them, and nowhere else (R20): not in the
server's log (at DEBUG, through successes, refusals and bad tokens), not in any error answer,
not in ``tokens list`` (CLI or API), and not in the database, which keeps only a hash."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx
from http_server import ApiServer, run_sql

from agentqueue.service.tokens import hash_secret


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _key(secret: str) -> str:
    """The secret part of a token: what follows ``aq_<12-character prefix>_`` (it may hold
    ``_`` itself)."""
    return secret[len(_prefix(secret)) + 1 :]


def _prefix(secret: str) -> str:
    """``aq_`` and the token's lookup prefix."""
    return secret[: len("aq_") + 12]


def _exercise(server: ApiServer, secret: str, answers: list[httpx.Response]) -> None:
    """Use a token for a success, a refusal, a missing task and a bad request."""
    with server.client(secret) as http:
        answers.append(http.get("/v1/stats"))
        answers.append(http.get("/v1/tokens"))  # 403 below admin
        answers.append(http.get(f"/v1/tasks/{uuid.uuid4()}"))
        answers.append(http.post("/v1/tasks", json={"title": "", "task_type": "docs"}))


def test_secrets_never_appear_but_in_the_answer_that_makes_them(server: ApiServer) -> None:
    """Tokens made by the CLI, the API and the token service are used, refused, revoked and
    expired, and bad tokens are sent in every way; afterwards no secret (nor its key part, nor
    its hash) is in the server's log or any answer but its creation, and the token lists show
    names and states only."""
    answers: list[httpx.Response] = []
    by_cli = server.cli_token(_name("cli"), "submitter", "secrets")
    with server.client(server.admin_secret) as admin:
        made = admin.post("/v1/tokens", json={"name": _name("api"), "role": "submitter"})
        assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
        by_api = made.json()["secret"]
        server.secrets.append(by_api)
    by_service = asyncio.run(server.token(_name("svc"), "approver", "secrets"))
    revoked_name = _name("revoked")
    revoked = server.cli_token(revoked_name, "operator", "secrets")
    expired = asyncio.run(server.expired_token(_name("expired"), "operator"))
    for secret in (by_cli, by_api, by_service, revoked):
        _exercise(server, secret, answers)
    server.cli("tokens", "revoke", revoked_name)
    with server.client(revoked) as http:  # the server trusts a checked token for 1 s
        for _ in range(200):
            if http.get("/v1/stats").status_code == 401:
                break
            time.sleep(0.05)
    with server.client(server.admin_secret) as admin:
        assert admin.post(f"/v1/tokens/{revoked_name}/revoke").status_code == 404  # already
    wrong_key = f"{_prefix(by_cli)}_{_key(by_api)}"
    unknown = f"aq_{'z' * 12}_{_key(by_service)}"
    for secret in (revoked, expired, wrong_key, unknown, f"not-quite-{by_cli}"):
        with server.client(secret) as http:
            answers.append(http.get("/v1/stats"))
    with httpx.Client(base_url=server.url) as raw:
        answers.append(raw.get("/v1/stats", headers={"Authorization": f"Basic {by_cli}"}))
        answers.append(raw.get("/v1/stats", headers={"Authorization": by_cli}))
        answers.append(raw.get("/v1/stats", headers={"X-Api-Key": by_cli}))
    assert [a.status_code for a in answers[-8:]] == [401] * 8
    details = [a.json()["detail"] for a in answers[-8:-3]]
    assert details[:4] == ["the token was revoked", "the token has expired", "unknown token",
                           "unknown token"], details  # fmt: skip

    secrets = [*server.secrets, wrong_key, unknown]
    leaks = []
    places = _places(server, answers)
    for secret in secrets:
        hashed = hash_secret(secret)
        for where, text in places:
            for what, value in (("secret", secret), ("key", _key(secret)), ("hash", hashed)):
                if value in text:
                    leaks.append(f"the {what} of {secret[:7]}... is in {where}")
    assert not leaks, "\n".join(sorted(set(leaks)))


def _places(server: ApiServer, answers: list[httpx.Response]) -> list[tuple[str, str]]:
    """Every text a secret must not be in."""
    listed_cli = server.cli("tokens", "list").stdout
    listed_json = server.cli("tokens", "list", "--json").stdout
    with server.client(server.admin_secret) as admin:
        listed_api = admin.get("/v1/tokens")
    assert listed_api.status_code == 200
    assert all({"secret", "secret_hash"}.isdisjoint(t) for t in listed_api.json())
    assert all({"secret", "secret_hash"}.isdisjoint(t) for t in json.loads(listed_json))
    places = [
        ("the server's log", server.log()),
        ("tokens list", listed_cli),
        ("tokens list --json", listed_json),
        ("GET /v1/tokens", listed_api.text),
    ]
    places += [(f"an answer {a.status_code} to {a.request.url.path}", a.text) for a in answers]
    places += [
        (f"the answer's headers {a.status_code} to {a.request.url.path}", str(a.headers))
        for a in answers
    ]
    return places


def test_the_database_keeps_a_hash_never_the_secret(server: ApiServer) -> None:
    """The stored token row has the secret's hash and lookup prefix, not its key."""
    name = _name("stored")
    secret = server.cli_token(name, "worker", "secrets")
    rows = run_sql(
        server.db_url,
        "SELECT prefix, secret_hash FROM aq_tokens WHERE name = %s",
        (name,),
    )
    assert rows == [(_prefix(secret).removeprefix("aq_"), hash_secret(secret))]
    if server.kind == "sqlite":
        path = Path(server.db_url.removeprefix("sqlite:///"))
        stored = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    else:
        dumped = run_sql(server.db_url, "SELECT row_to_json(t)::text FROM aq_tokens t")
        stored = "\n".join(row[0] for row in dumped).encode()
    assert hash_secret(secret).encode() in stored
    assert _key(secret).encode() not in stored
