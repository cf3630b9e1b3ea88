"""A real ``agentqueue api`` server process for the tests, on a port it picks itself, over a
temporary SQLite file or a fresh PostgreSQL database of its own.

``api_server`` (module scope, once per backend) is the fixture; :func:`start_api_server` starts
one with other settings (a low rate limit, say) for a single test. Each server comes with an
admin token made through the CLI, as an operator would make the first one.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest

AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
PG_SERVER = os.environ.get("AGENTQUEUE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
START_SECS = 60.0
"""The longest a server may take to listen (generous: a loaded machine starts slowly)."""
LISTENING = re.compile(r"API listening on (http://[^\s/]+)/v1")

SERVER_CONFIG = """
[api]
max_body_bytes = 65536

[[guardrails]]
name = "deletion"
pattern = "drop table"

[agents.fixer]
command = ["true"]
task_types = ["agentwork"]
max_concurrent = 2
"""
"""What the shared servers run with: a small body limit (413 is cheap to reach), a guardrail
that holds titles saying "drop table" for approval, and one agent (so admission waits for a
scheduler; the tests admit by hand through a queue on the same database)."""


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any agentqueue setting of the caller's, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    env.update(extra)
    return env


@dataclass
class ApiServer:
    """A running ``agentqueue api`` and what the tests need to talk to it."""

    url: str
    """``http://127.0.0.1:PORT`` (the API is under ``/v1``)."""
    db: str
    backend: str
    config: Path
    admin_token: str
    process: subprocess.Popen[bytes]
    log: Path
    made: dict[tuple[str, str, str | None], str] = field(default_factory=dict)

    def token(self, role: str, tenant: str | None = None, name: str | None = None) -> str:
        """The secret of a new token of ``role`` (and ``tenant``), made by the admin through
        the API."""
        name = name or f"{role}-{uuid.uuid4().hex[:8]}"
        answer = httpx.post(
            f"{self.url}/v1/tokens",
            json={"name": name, "role": role, "tenant": tenant},
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        secret: str = answer.json()["secret"]
        return secret

    def output(self) -> str:
        """What the server printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _new_pg_database() -> str:
    name = f"aq_api_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_SERVER} ({exc})", pytrace=False)
    base, _, _ = PG_SERVER.rpartition("/")
    return f"{base}/{name}"


def _drop_pg_database(url: str) -> None:
    name = url.rpartition("/")[2]
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin_token(db: str, config: Path) -> str:
    made = subprocess.run(
        [str(AGENTQUEUE), "--db", db, "--config", str(config), "tokens", "create",
         "--name", "admin", "--role", "admin"],
        capture_output=True, text=True, timeout=120, env=clean_env(), check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def start_api_server(
    backend: str,
    folder: Path,
    *,
    config: str = SERVER_CONFIG,
    db: str | None = None,
    **env: str,
) -> Iterator[ApiServer]:
    """Start ``agentqueue api --port 0`` over a new database of ``backend`` (``sqlite`` or
    ``postgres``), or over ``db`` when given, with ``config`` and extra environment ``env``;
    stop it (and drop the PostgreSQL database it made) on the way out."""
    folder.mkdir(parents=True, exist_ok=True)
    made_db = db is None and backend == "postgres"
    if db is None:
        db = f"sqlite:///{folder / 'api.db'}" if backend == "sqlite" else _new_pg_database()
    config_file = folder / "agentqueue.toml"
    config_file.write_text(config)
    log = folder / "api.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        admin = _admin_token(db, config_file)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(AGENTQUEUE), "--db", db, "--config", str(config_file), "api", "--port", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean_env(AGENTQUEUE_LOG_LEVEL="WARNING", **env),
            )
        url = _wait_listening(process, log)
        yield ApiServer(url, db, backend, config_file, admin, process, log)
    finally:
        if process is not None:
            _stop(process)
        if made_db:
            _drop_pg_database(db)


def _wait_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + START_SECS
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = LISTENING.search(text)
        if found:
            return found.group(1)
        if process.poll() is not None:
            pytest.fail(f"agentqueue api exited {process.returncode}:\n{text}", pytrace=False)
        time.sleep(0.05)
    pytest.fail(f"agentqueue api did not listen within {START_SECS:g} s:\n{text}", pytrace=False)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def api_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A real API server for the test module, once per backend (SQLite file, and a fresh
    PostgreSQL database). Tests share it: give tasks, names and types of your own."""
    folder = tmp_path_factory.mktemp(f"api-{request.param}")
    with start_api_server(request.param, folder) as server:
        yield server
