"""Shared helpers of the store behaviour suite: raw database access for tampering, fresh
(unmigrated) databases, and extra queues on the test's database."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.store.postgres.dialect import postgres_store

PG_SERVER_FIXTURE = "pg_database"


def is_sqlite(url: str) -> bool:
    """Whether ``url`` names a SQLite file."""
    return url.startswith("sqlite:")


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///...`` URL (its options left out)."""
    return url.removeprefix("sqlite:///").partition("?")[0]


@pytest.fixture(
    params=["sqlite", "sqlite-process", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind, SQLite twice: its writer connection in the store's
    thread (the default) and in a process of its own (``?writer=process``, where the
    long-running commands' ``auto`` writer is while they are busy): every store behaviour holds
    both ways."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    path = f"sqlite:///{tmp_path / 'queue.db'}"
    return f"{path}?writer=process" if request.param == "sqlite-process" else path


class RawDatabase:
    """The test's database through its own driver, beside (not through) agentqueue.

    ``bypass=True`` switches off the append-only guards of ``aq_events`` first, the way someone
    with direct write access to the database could.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    def execute(self, sql: str, params: tuple[Any, ...] = (), *, bypass: bool = False) -> int:
        """Run one statement written with ``?`` placeholders; return the rows it changed."""
        if is_sqlite(self.url):
            conn = sqlite3.connect(sqlite_path(self.url), timeout=30)
            try:
                if bypass:
                    conn.execute("DROP TRIGGER IF EXISTS aq_events_no_update")
                    conn.execute("DROP TRIGGER IF EXISTS aq_events_no_delete")
                cur = conn.execute(sql, tuple(str(p) if isinstance(p, UUID) else p for p in params))
                conn.commit()
                return cur.rowcount
            finally:
                conn.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            if bypass:
                conn.execute("SET session_replication_role = replica")
            cur = conn.execute(sql.replace("?", "%s").encode(), params)
            return cur.rowcount

    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first column of the first row of a query written with ``?`` placeholders."""
        if is_sqlite(self.url):
            conn = sqlite3.connect(sqlite_path(self.url), timeout=30)
            try:
                values = tuple(str(p) if isinstance(p, UUID) else p for p in params)
                row = conn.execute(sql, values).fetchone()
            finally:
                conn.close()
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                row = conn.execute(sql.replace("?", "%s").encode(), params).fetchone()
        return None if row is None else row[0]


@pytest.fixture
def raw(db_url: str) -> RawDatabase:
    """Direct driver access to the test's database."""
    return RawDatabase(db_url)


@pytest.fixture(
    params=["sqlite", "sqlite-process", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def fresh_db_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A factory of brand-new databases of each kind that nothing has migrated yet."""
    created: list[str] = []
    server = ""
    if request.param == "postgres":
        # The session database proves the server is reachable (and fails the test if it is not).
        server = request.getfixturevalue(PG_SERVER_FIXTURE)

    def make() -> str:
        if request.param.startswith("sqlite"):
            url = f"sqlite:///{tmp_path / f'fresh-{uuid.uuid4().hex[:8]}.db'}"
            return f"{url}?writer=process" if request.param == "sqlite-process" else url
        name = f"aq_fresh_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"'.encode())
        created.append(name)
        return server.rpartition("/")[0] + "/" + name

    yield make
    if created:
        with psycopg.connect(server, autocommit=True) as admin:
            for name in created:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


QueueFactory = Callable[..., AbstractAsyncContextManager[AsyncQueue]]


@pytest.fixture
def open_queue(db_url: str, clock: ManualClock, settings: Settings) -> QueueFactory:
    """Open another AsyncQueue on the test's database and clock (``tenant=...`` to scope it)."""

    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[AsyncQueue]:
        options.setdefault("clock", clock)
        options.setdefault("settings", settings)
        q = AsyncQueue(db_url, **options)
        await q.open()
        try:
            yield q
        finally:
            await q.close()

    return make


@pytest.fixture
async def one_connection(pg_url: str) -> AsyncIterator[Any]:
    """A PostgreSQL store whose pool holds exactly one connection: every transaction shares
    it (what one transaction leaves on its connection is what the next one finds)."""
    store = postgres_store(pg_url, min_size=1, max_size=1)
    await store.open()
    yield store
    await store.close()
