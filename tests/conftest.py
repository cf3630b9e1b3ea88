"""Fixtures: every behaviour test runs on SQLite and on the real PostgreSQL server.

PostgreSQL is never skipped: when it cannot be reached, the PostgreSQL half of the suite fails with
a message saying so. ``AGENTQUEUE_TEST_PG`` points at a server (default: the local one); each
pytest worker gets its own database, emptied before every test.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from pg_instance import TEST_PASSWORD, PgInstance, find_bin

PG_SERVER = os.environ.get("AGENTQUEUE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _with_dbname(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="session")
def pg_database(worker_id: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this pytest worker."""
    name = f"aq_test_{worker_id}_{os.getpid()}".replace("-", "_")
    try:
        admin = psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_SERVER} ({exc}); the PostgreSQL tests need it. "
            "Start it, or point AGENTQUEUE_TEST_PG at a server.",
            pytrace=False,
        )
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _with_dbname(PG_SERVER, name)
    yield url
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _empty_pg(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('aq_tasks') IS NOT NULL").fetchone()
        if exists and exists[0]:
            # Triggers keep aq_events append-only; replica mode lets the test harness reset it.
            conn.execute("SET session_replication_role = replica")
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                    " AND tablename LIKE 'aq\\_%' AND tablename <> 'aq_schema_version'"
                )
            ]
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    url: str = request.getfixturevalue("pg_database")
    _empty_pg(url)
    return url


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """An empty PostgreSQL database (for PostgreSQL-only tests)."""
    _empty_pg(pg_database)
    return pg_database


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when a test moves it."""
    return ManualClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))


@pytest.fixture
def settings() -> Settings:
    """Default settings with the environment ignored, except that tasks wait in pending for an
    explicit admission (the store tests drive every step by hand; admission at submit has tests
    of its own)."""
    return Settings(queue={"admit_on_submit": False})


@pytest.fixture
async def queue(db_url: str, clock: ManualClock, settings: Settings) -> AsyncIterator[AsyncQueue]:
    """An open AsyncQueue on each backend, on the manual clock."""
    q = AsyncQueue(db_url, clock=clock, settings=settings)
    await q.open()
    yield q
    await q.close()


@pytest.fixture(scope="module")
def pg() -> Iterator[PgInstance]:
    """A private PostgreSQL server of the test module's own, which its tests may stop, crash and
    restart (never the shared one); initdb runs once a module, so pytest-xdist workers never
    share one. Never skipped: without initdb and pg_ctl the tests fail saying so."""
    try:
        find_bin()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    instance = PgInstance(TEST_PASSWORD)
    try:
        instance.init()
        yield instance
    finally:
        instance.destroy()
