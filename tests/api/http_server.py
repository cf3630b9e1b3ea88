"""A real ``agentqueue api`` server in a subprocess, for the HTTP API and client tests.

Each server gets a fresh database of its own (a SQLite file, or a PostgreSQL database made for
it and dropped after) unless it is given one, a configuration file with its ``[api]`` settings,
and a log file that captures everything the process prints (stdout and stderr), so tests can
read what it logged. The port is chosen by the operating system (``--port 0``) and read from the
server's own "API listening on ..." line. Each comes with an admin token named ``admin``, made
with the CLI as an operator would make the first one.

Two module-scoped fixtures, once per database kind, start their server the same way with
different settings: ``server`` (no rate limit, tokens trusted for 1 s: the HTTP API tests) and
``client_server`` (the default limits, a small body limit, a guardrail on "drop table" and one
agent: the tests of Client, AsyncClient and ``agentqueue --api``). ``driver`` is a queue on
``client_server``'s database that plays the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.clock import SystemClock

PG_SERVER = os.environ.get("AGENTQUEUE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
LISTENING = re.compile(r"API listening on (http://[0-9.]+:\d+)/v1")
START_SECS = 60.0

HOLD_PATTERN = "needs-approval"
"""Titles with this are held for approval by the test servers' guardrail."""

BASE_CONFIG = f"""
[[guardrails]]
name = "hold"
pattern = "{HOLD_PATTERN}"
"""


def _with_dbname(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def fresh_database(kind: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database of ``kind`` (dropped afterwards for PostgreSQL)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'queue.db'}"
        return
    name = f"aq_api_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is not reachable at {PG_SERVER} ({exc}); the PostgreSQL API tests "
            "need it (AGENTQUEUE_TEST_PG points at another server)."
        ) from exc
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(PG_SERVER, name)
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_sql(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a server's database directly (as an operator with a database
    shell would), committed; return its rows."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=30)
        try:
            with conn:
                rows = conn.execute(sql.replace("%s", "?"), params).fetchall()
            return [tuple(row) for row in rows]
        finally:
            conn.close()
    with psycopg.connect(db_url, autocommit=True) as pg:
        cur = pg.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()] if cur.description else []


def toml_config(api: Mapping[str, Any], extra: str = "") -> str:
    """A configuration file's text: the test guardrail, ``[api]`` settings, and ``extra``."""
    lines = [BASE_CONFIG, "[api]"]
    for key, value in api.items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n" + extra


@dataclass
class ApiServer:
    """A running ``agentqueue api`` process and what a test needs to talk to it."""

    kind: str
    db_url: str
    directory: Path
    config_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes]
    url: str
    admin_secret: str = ""
    secrets: list[str] = field(default_factory=list)
    """Every secret made for this server (the tests check none is ever printed)."""

    # --- the process ------------------------------------------------------------------------

    def log(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop within 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    # --- the CLI on the same database -------------------------------------------------------

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``agentqueue --db URL --config FILE ARGS`` and return what it printed."""
        done = subprocess.run(
            [AGENTQUEUE, "--db", self.db_url, "--config", str(self.config_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )
        if check and done.returncode != 0:
            raise AssertionError(f"agentqueue {' '.join(args)} failed: {done.stderr}")
        return done

    def cli_token(self, name: str, role: str, tenant: str | None = None) -> str:
        """Make a token with ``agentqueue tokens create --json``; return its secret."""
        args = ["tokens", "create", "--name", name, "--role", role, "--json"]
        if tenant is not None:
            args += ["--tenant", tenant]
        secret = str(json.loads(self.cli(*args).stdout)["secret"])
        self.secrets.append(secret)
        return secret

    # --- the same database from this process ------------------------------------------------

    def queue(
        self, clock: ManualClock | SystemClock | None = None, actor: str = "test"
    ) -> AsyncQueue:
        """An AsyncQueue on the server's database with the server's configuration (not yet
        opened)."""
        return AsyncQueue(self.db_url, config=self.config_path, clock=clock, actor=actor)

    async def token(
        self,
        name: str,
        role: str,
        tenant: str | None = None,
        *,
        expires: str | None = None,
        made_at: datetime | None = None,
    ) -> str:
        """Make a token through the token service (as the CLI does) and return its secret;
        ``made_at`` makes it on a clock set to that time (an ``expires`` from then may already
        have passed)."""
        clock = ManualClock(made_at) if made_at is not None else None
        async with self.queue(clock) as q:
            made = await q.create_token(name, role=role, tenant=tenant, expires=expires)
        self.secrets.append(made.secret)
        return made.secret

    def api_token(self, role: str, tenant: str | None = None, name: str | None = None) -> str:
        """The secret of a new token of ``role`` (and ``tenant``), made by the admin through
        the API (``POST /v1/tokens``)."""
        name = name or f"{role}-{uuid.uuid4().hex[:8]}"
        with self.client(self.admin_secret) as http:
            answer = http.post("/v1/tokens", json={"name": name, "role": role, "tenant": tenant})
        assert answer.status_code == 201, answer.text
        secret = str(answer.json()["secret"])
        self.secrets.append(secret)
        return secret

    async def expired_token(self, name: str, role: str = "admin") -> str:
        """A token that expired an hour ago (made two hours ago to last one)."""
        past = SystemClock().now() - timedelta(hours=2)
        return await self.token(name, role, expires="1h", made_at=past)

    def client(self, secret: str | None = None, **options: Any) -> httpx.Client:
        """An HTTP client of the server, sending ``secret`` as its bearer token."""
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **options)

    def async_client(self, secret: str | None = None, **options: Any) -> httpx.AsyncClient:
        """An async HTTP client of the server, sending ``secret`` as its bearer token."""
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=60, **options)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any agentqueue setting of the caller's, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    env.update(extra)
    return env


def _env() -> dict[str, str]:
    # DEBUG: the most a server may ever say, for the leak checks
    return clean_env(AGENTQUEUE_LOG_LEVEL="DEBUG", PYTHONUNBUFFERED="1")


def start_server(
    kind: str,
    db_url: str,
    directory: Path,
    api: Mapping[str, Any],
    extra_config: str = "",
    env: Mapping[str, str] | None = None,
) -> ApiServer:
    """Start ``agentqueue api`` on a free port over ``db_url`` with ``[api]`` settings ``api``
    (and ``extra_config``, and the environment variables ``env``) and wait until it listens;
    its admin token is made with the CLI."""
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "agentqueue.toml"
    config_path.write_text(toml_config(api, extra_config))
    log_path = directory / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [AGENTQUEUE, "--db", db_url, "--config", str(config_path), "api", "--port", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env() | dict(env or {}),
            cwd=directory,
        )
    deadline = time.monotonic() + START_SECS
    url = None
    while url is None:
        found = LISTENING.search(log_path.read_text(errors="replace"))
        if found:
            url = found.group(1)
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"agentqueue api did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    server = ApiServer(kind, db_url, directory, config_path, log_path, proc, url)
    try:
        server.admin_secret = server.cli_token("admin", "admin")
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_server(
    kind: str,
    directory: Path,
    api: Mapping[str, Any],
    extra_config: str = "",
    *,
    db_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[ApiServer]:
    """A server over a fresh database of ``kind`` (dropped after), or over ``db_url`` when
    given (left as it is), with the environment variables ``env``; stopped after."""
    with contextlib.ExitStack() as stack:
        if db_url is None:
            db_url = stack.enter_context(fresh_database(kind, directory))
        server = start_server(kind, db_url, directory, api, extra_config, env)
        try:
            yield server
        finally:
            server.stop()


MAIN_API_SETTINGS = {
    "requests_per_minute": 0,  # no rate limit: the matrix and schema runs make many requests
    "token_cache_secs": 1,
}

CLIENT_API_SETTINGS = {"max_body_bytes": 65536}
"""The client tests' server keeps the default rate limit and token cache; its small body limit
makes 413 cheap to reach."""

CLIENT_CONFIG = """
[[guardrails]]
name = "deletion"
pattern = "drop table"

[agents.fixer]
command = ["true"]
task_types = ["agentwork"]
max_concurrent = 2
"""
"""Beside the ``[api]`` settings of the client tests' server: a guardrail that holds titles
saying "drop table" for approval, and one agent (so admission waits for a scheduler; the tests
admit by hand through a queue on the same database)."""


def _shared_server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    api: Mapping[str, Any],
    extra_config: str = "",
) -> Iterator[ApiServer]:
    """A server of ``request.param``'s kind shared by the tests of one module. Afterwards it
    must still be running and have logged no traceback (whatever the tests sent it, nothing
    went unexpectedly wrong)."""
    kind = request.param
    directory = tmp_path_factory.mktemp(f"api-{kind}")
    with running_server(kind, directory, api, extra_config) as found:
        yield found
        assert found.alive(), f"the server stopped:\n{found.log()[-3000:]}"
        assert "Traceback" not in found.log(), f"the server logged:\n{found.log()[-3000:]}"


KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A running ``agentqueue api`` over a fresh SQLite file and over a fresh PostgreSQL
    database, shared by the tests of one module; no rate limit, tokens trusted for 1 s."""
    yield from _shared_server(request, tmp_path_factory, MAIN_API_SETTINGS)


@pytest.fixture(scope="module", params=KINDS)
def client_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """The same, with the client tests' settings (``CLIENT_API_SETTINGS``, ``CLIENT_CONFIG``).
    Tests share it: give tasks, names and types of your own."""
    yield from _shared_server(request, tmp_path_factory, CLIENT_API_SETTINGS, CLIENT_CONFIG)


@pytest.fixture
async def driver(client_server: ApiServer) -> AsyncIterator[AsyncQueue]:
    """A queue on ``client_server``'s database, with its configuration, to play the worker."""
    async with client_server.queue(actor="driver") as queue:
        yield queue
