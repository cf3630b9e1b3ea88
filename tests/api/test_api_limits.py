"""The API's guards and health: the body limit (413), the per-token rate (429 with
Retry-After), health and readiness without a token (readiness 503 when the schema is behind or
the database is gone), nothing else without a token, and 500 answers whose error id is in the
server's log.

These run on servers of their own with small limits ([api] max_body_bytes 2048, 60 requests a
minute with a burst of 5), so the main server's tests are never rate limited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from app_routes import build_app, served_routes
from fastapi import FastAPI
from http_server import ApiServer, fresh_database, run_sql, running_server, start_server

from agentqueue import AsyncQueue
from agentqueue.api.auth import guarded
from agentqueue.config import Settings
from agentqueue.dashboard.routes import router as dashboard_router
from agentqueue.domain import access

MAX_BODY = 2048
PER_MINUTE = 60
BURST = 5
LIMITED = {
    "max_body_bytes": MAX_BODY,
    "requests_per_minute": PER_MINUTE,
    "burst": BURST,
    "token_cache_secs": 1,
}
PUBLIC = {"/healthz", "/readyz"}


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def limited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A server with a 2 KiB body limit and 60 requests a minute (burst 5) per token."""
    directory = tmp_path_factory.mktemp(f"limited-{request.param}")
    with running_server(request.param, directory, LIMITED) as found:
        yield found


def _fresh_token(server: ApiServer, role: str = "submitter") -> str:
    return asyncio.run(server.token(f"lim-{uuid.uuid4().hex[:8]}", role, "default"))


# --- the body limit -----------------------------------------------------------------------


def _big_task(size: int) -> bytes:
    head = b'{"title": "big", "task_type": "docs", "payload": {"blob": "'
    tail = b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_body_over_the_limit_is_refused_with_413(limited: ApiServer) -> None:
    """Declared by Content-Length, or sent chunked without one: 413 as a problem; a body just
    under the limit goes through."""
    secret = _fresh_token(limited)
    with limited.client(secret) as http:
        headers = {"Content-Type": "application/json"}
        declared = http.post("/v1/tasks", content=_big_task(MAX_BODY + 1), headers=headers)
        assert declared.status_code == 413, declared.text
        assert declared.headers["content-type"] == "application/problem+json"
        assert "max_body_bytes" in declared.json()["detail"]

        def chunks() -> Iterator[bytes]:
            body = _big_task(MAX_BODY * 4)
            for at in range(0, len(body), 512):
                yield body[at : at + 512]

        chunked = http.post("/v1/tasks", content=chunks(), headers=headers)
        assert chunked.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in chunked.request.headers
        assert chunked.status_code == 413, chunked.text
        assert chunked.headers["content-type"] == "application/problem+json"
        fits = http.post("/v1/tasks", content=_big_task(MAX_BODY), headers=headers)
        assert fits.status_code == 201, fits.text
        assert http.get("/v1/stats").status_code == 200  # the connection and server carry on


# --- the rate limit -----------------------------------------------------------------------


def test_past_the_rate_a_token_gets_429_with_retry_after(limited: ApiServer) -> None:
    """A burst of 5, then 1 a second: the requests past it are refused with 429 and
    Retry-After, other tokens are not held back, and after Retry-After the token is served
    again."""
    secret = _fresh_token(limited)
    other = _fresh_token(limited)
    with limited.client(secret) as http, limited.client(other) as bystander:
        answers = [http.get("/v1/stats") for _ in range(BURST + 5)]
        codes = [a.status_code for a in answers]
        assert codes[:BURST] == [200] * BURST, codes
        refused = [a for a in answers if a.status_code == 429]
        assert refused, codes
        for answer in refused:
            assert answer.headers["content-type"] == "application/problem+json"
            assert int(answer.headers["retry-after"]) >= 1
        assert bystander.get("/v1/stats").status_code == 200
        wait = int(refused[-1].headers["retry-after"])
        time.sleep(wait + 0.2)
        assert http.get("/v1/stats").status_code == 200


# --- health, readiness and tokens ---------------------------------------------------------


def test_health_and_readiness_answer_without_a_token(limited: ApiServer) -> None:
    """The two public routes, and every other route the app serves is under /v1 (where the
    authorization matrix shows each refuses a request without a token) or is a dashboard page
    (which sends a browser without a session to its login form: tests/dashboard) or the
    Prometheus scrape at /metrics (which needs a token too)."""
    with limited.client() as http:
        health = http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert http.get("/v1/stats").status_code == 401
        assert http.get("/metrics").status_code == 401
        page = http.get("/tasks")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
    dashboard = {route.path for route in dashboard_router.routes}  # type: ignore[attr-defined]
    others = {path for path, _ in served_routes(build_app())} - PUBLIC - dashboard - {"/metrics"}
    assert others and all(path.startswith("/v1/") for path in others), sorted(others)


def test_readiness_is_503_while_the_schema_is_behind(limited: ApiServer) -> None:
    """Take the newest migration's record out of the database (as a restore of an older
    backup would): /readyz says 503 naming the versions; put it back: ready again."""
    latest = run_sql(
        limited.db_url,
        "SELECT version, name FROM aq_schema_version ORDER BY version DESC LIMIT 1",
    )[0]
    run_sql(limited.db_url, "DELETE FROM aq_schema_version WHERE version = %s", (latest[0],))
    try:
        with limited.client() as http:
            behind = http.get("/readyz")
        assert behind.status_code == 503, behind.text
        body = behind.json()
        assert body["status"] == "unavailable"
        assert f"version {latest[0] - 1}" in body["detail"] and str(latest[0]) in body["detail"]
    finally:
        run_sql(
            limited.db_url,
            "INSERT INTO aq_schema_version (version, name) VALUES (%s, %s)",
            latest,
        )
    with limited.client() as http:
        assert http.get("/readyz").status_code == 200


@pytest.mark.postgres
def test_readiness_is_503_when_the_database_is_gone(tmp_path: Path) -> None:
    """PostgreSQL: the server's database is dropped under it (its connections ended): /readyz
    answers 503 saying the database is unavailable, and /healthz still answers."""
    with fresh_database("postgres", tmp_path) as db_url:
        server = start_server("postgres", db_url, tmp_path, {"requests_per_minute": 0})
        try:
            with server.client() as http:
                assert http.get("/readyz").status_code == 200
                name = db_url.rsplit("/", 1)[1]
                admin_url = db_url.rsplit("/", 1)[0] + "/postgres"
                run_sql(admin_url, f'DROP DATABASE "{name}" WITH (FORCE)')
                gone = http.get("/readyz")
                assert gone.status_code == 503, gone.text
                assert gone.json()["status"] == "unavailable"
                assert "unavailable" in gone.json()["detail"]
                assert http.get("/healthz").status_code == 200
        finally:
            server.stop()


# --- unexpected errors --------------------------------------------------------------------


def test_a_500_carries_an_error_id_that_the_log_has(tmp_path: Path) -> None:
    """A SQLite file damaged under a running server (pages overwritten, as a failing disk
    would): the requests that meet the damage are answered 500 with an error id and no detail
    of the server; the log has each id with its traceback, and no token's secret."""
    with running_server("sqlite", tmp_path, {"requests_per_minute": 0}) as server:
        secret = server.admin_secret
        with server.client(secret) as http:
            for _ in range(200):
                payload = {"blob": "y" * 700}
                made = http.post("/v1/tasks", json={"title": "t", "task_type": "docs",
                                                    "payload": payload})  # fmt: skip
                assert made.status_code == 201
            path = server.db_url.removeprefix("sqlite:///")
            _damage(path)
            answers = [http.get("/v1/tasks", params={"limit": 1000}), http.get("/v1/stats")]
        log = server.log()
    for answer in answers:
        assert answer.status_code == 500, answer.text[:300]
        assert answer.headers["content-type"] == "application/problem+json"
        body = answer.json()
        error_id = body["error_id"]
        assert error_id and error_id in body["detail"]
        assert "SQLite" not in answer.text and "malformed" not in answer.text
        assert f"error {error_id} in GET /v1/" in log
    assert "Traceback" in log and "malformed" in log
    assert secret not in log


def _damage(path: str) -> None:
    """Overwrite part of every page but the first two, then commit a change to the header
    page, so every connection drops the pages it holds and reads the damaged ones."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(path)
    with open(path, "r+b") as db:
        for offset in range(8192, size, 4096):
            db.seek(offset + 100)
            db.write(os.urandom(200))
    conn.execute("PRAGMA user_version = 7")
    conn.close()


async def test_an_unexpected_exception_is_a_500_with_an_error_id_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last resort (in process: no route of the server raises anything but the queue's
    own errors, so one is added here): an exception no handler knows is a 500 problem with an
    error id, logged with its traceback, and nothing of the exception reaches the client."""
    queue = AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", settings=Settings())
    app = build_app_on(queue)
    async with queue:
        secret = (await queue.create_token("boom-admin", role="admin")).secret

        @app.get("/v1/boom", **guarded(access.SUBMITTER))
        async def boom() -> None:
            raise RuntimeError("a secret internal detail")

        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://aq") as http,
        ):
            with caplog.at_level(logging.ERROR, logger="agentqueue.api"):
                answer = await http.get("/v1/boom", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 500
    body = answer.json()
    assert body["title"] == "Internal server error" and body["error_id"]
    assert "secret internal detail" not in answer.text and "RuntimeError" not in answer.text
    [record] = [r for r in caplog.records if body["error_id"] in r.getMessage()]
    assert "GET /v1/boom" in record.getMessage() and record.exc_info is not None
    assert secret not in caplog.text


def build_app_on(queue: AsyncQueue) -> FastAPI:
    """The app over ``queue`` (as ``create_app`` builds it for a server)."""
    from agentqueue.api.app import create_app

    return create_app(queue)
