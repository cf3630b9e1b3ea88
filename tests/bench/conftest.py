"""The benchmarks' tests: a PostgreSQL database of their own per test module and process."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

PG_SERVER = os.environ.get("AGENTQUEUE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def bench_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a database for the run (the bench creates it, and the peers' databases named
    after it); all dropped before and after."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = f"aq_{module}_{os.getpid()}"
    base, _, _ = PG_SERVER.rpartition("/")

    def drop() -> None:
        with psycopg.connect(PG_SERVER, autocommit=True) as admin:
            # The peers' (<name>_<peer>) and the backlog sizes' databases are named after it.
            named = admin.execute(
                "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (f"{name}_",)
            ).fetchall()
            for db in (name, *(row[0] for row in named)):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    drop()
    yield f"{base}/{name}"
    drop()
