"""Database administration for tools such as the benchmarks, kept here because only the store
imports a database driver (ARCHITECTURE rule 1). Nothing in the queue itself uses it."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

SQLITE_VERSION = sqlite3.sqlite_version
"""The version of the SQLite library the sqlite3 module runs."""


def dbname(url: str) -> str:
    """The database name of a PostgreSQL URL."""
    name = urlsplit(url).path.lstrip("/")
    return name or "postgres"


def with_dbname(url: str, name: str) -> str:
    """The same PostgreSQL URL naming another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def ensure_database(url: str) -> None:
    """Create the database of ``url`` if it does not exist."""
    admin_url = with_dbname(url, "postgres")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname(url),))
        if await cur.fetchone() is None:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname(url))))


async def drop_database(url: str) -> None:
    """Drop the database of ``url`` if it exists."""
    admin_url = with_dbname(url, "postgres")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname(url)))
        )


async def server_version(url: str) -> str:
    """``SHOW server_version`` of the PostgreSQL server."""
    return str(await scalar(url, "SHOW server_version") or "?")


async def truncate_tables(url: str) -> None:
    """Empty every agentqueue table of a migrated PostgreSQL database (aq_events is append-only
    by trigger, so with ``session_replication_role = replica``)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'aq\\_%' AND tablename <> 'aq_schema_version'"
        )
        tables = [str(row[0]) for row in await cur.fetchall()]
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in tables)
            )
        )


async def execute(url: str, statement: str) -> None:
    """Run one statement outside a transaction (ANALYZE, VACUUM)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(statement.encode())


async def scalar(url: str, query: str) -> Any:
    """The one value a PostgreSQL query returns."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(query.encode())
        row = await cur.fetchone()
        return None if row is None else row[0]


async def checkpoint(url: str) -> bool:
    """A CHECKPOINT of the server of ``url`` (every database's dirty pages written now); False
    if the role may not (PostgreSQL 15: a superuser or a member of pg_checkpoint)."""
    try:
        await execute(url, "CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True
