"""Sending GitHub webhook deliveries to a test server: the real bodies in ``fixtures/github``
(see its README), signed as GitHub signs them, and variants of them for a repository, number
and time of a test's own."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import httpx

FIXTURES = Path(__file__).parent / "fixtures" / "github"
SECRET = "test-webhook-secret-3f9c1a"
OCTO_SECRET = "octo-webhook-secret-77d2e0"
SECRET_ENV = {"AQ_TEST_GITHUB_SECRET": SECRET, "AQ_TEST_GITHUB_SECRET_OCTO": OCTO_SECRET}
TENANT = "gh"

RULES = """
[[intake.github]]
repository = "Codertocat/*"
tenant = "gh"
secret_env = "AQ_TEST_GITHUB_SECRET"
labels = { "bug" = "bugfix", "agent:docs" = "docs" }
mention = "@agentqueue"

[[intake.github]]
repository = "Octocoders/*"
tenant = "octo"
secret_env = "AQ_TEST_GITHUB_SECRET_OCTO"
"""


def raw(name: str) -> bytes:
    """A fixture's exact bytes."""
    return (FIXTURES / f"{name}.json").read_bytes()


def event_of(name: str) -> str:
    """The X-GitHub-Event of a fixture (its file name up to the first dot)."""
    return name.split(".", 1)[0]


def sign(body: bytes, secret: str = SECRET) -> str:
    """``X-Hub-Signature-256`` for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def headers(
    event: str, body: bytes, secret: str | None = SECRET, delivery: str | None = None
) -> dict[str, str]:
    """The headers GitHub sends (a fresh delivery id unless given)."""
    out = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }
    if secret is not None:
        out["X-Hub-Signature-256"] = sign(body, secret)
    return out


def post(http: httpx.Client, event: str, body: bytes, **options: Any) -> httpx.Response:
    """POST one delivery."""
    return http.post("/v1/intake/github", content=body, headers=headers(event, body, **options))


def variant(name: str, repo: str, number: int | None = None, **changes: Any) -> dict[str, Any]:
    """A fixture's body moved to repository ``Codertocat/<repo>`` (and issue or pull request
    ``number``), with ``changes`` applied by dotted path (``issue.updated_at``)."""
    body = copy.deepcopy(json.loads(raw(name)))
    body["repository"]["full_name"] = f"Codertocat/{repo}"
    body["repository"]["name"] = repo
    for key in ("issue", "pull_request"):
        if key in body and number is not None:
            body[key]["number"] = number
    if "number" in body and number is not None:
        body["number"] = number
    for path, value in changes.items():
        node = body
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return body


def send(http: httpx.Client, event: str, body: dict[str, Any], **options: Any) -> httpx.Response:
    """POST a variant (as compact JSON, signed)."""
    return post(http, event, json.dumps(body).encode(), **options)
