"""Database errors classified once, at the store's boundary (ARCHITECTURE rule 11).

A driver error becomes :class:`StoreUnavailable` when waiting may mend it (the server restarts,
the connection drops, another writer holds the file), :class:`StoreMisconfigured` when it will
not (no such database, a wrong password, a bad option, a schema this release cannot use), and
plain :class:`StoreError` otherwise. Messages name the cause and never carry a password.
"""

from __future__ import annotations

import re
import sqlite3

from ..domain.errors import StoreError, StoreLocked, StoreMisconfigured, StoreUnavailable

# SQLSTATE classes and codes a later try may get past: connection exceptions (08), operator
# intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now),
# transaction rollback (40: serialization failure, deadlock), insufficient resources (53).
_TRANSIENT_STATES = ("08", "40", "53", "57P01", "57P02", "57P03", "57014")
# ... and ones it will not: authorization (28), no such database (3D000), undefined table or
# column (42P01, 42703: an unmigrated schema), invalid catalog or schema name.
_PERMANENT_STATES = ("28", "3D000", "3F000", "42P01", "42703")

# A failed connect carries no SQLSTATE, only libpq's message.
_PERMANENT_CONNECT = (
    "does not exist",
    "password authentication failed",
    "no password supplied",
    "no pg_hba.conf entry",
    "invalid sslmode",
    "invalid connection option",
    "invalid dsn",
    "invalid integer value",
    "invalid port",
    'missing "="',
    "could not translate host name",
    "server does not support ssl",
    "certificate",
)


def redact(message: str) -> str:
    """Drop anything that looks like a password from a driver message."""
    message = re.sub(r"//([^:/@\s]+):[^@\s]+@", r"//\1:***@", message)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", message)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text)
    # libpq puts "connection failed: connection to server at ... failed: FATAL:" before the
    # reason: keep the reason.
    for marker in ("FATAL:", "failed:"):
        if marker in line:
            line = line.rsplit(marker, 1)[1].strip() or line
            break
    return redact(line)


def from_postgres(exc: BaseException) -> StoreError:
    """The classified error for a psycopg (or pool) exception."""
    if isinstance(exc, StoreError):
        return exc
    # Loaded here: only a PostgreSQL store calls this (with psycopg loaded), and a SQLite
    # one never pays for it (start-up time).
    import psycopg
    from psycopg_pool import PoolTimeout

    message = _first_line(exc)
    if isinstance(exc, PoolTimeout):
        return StoreUnavailable(f"PostgreSQL is unreachable: {message}")
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith(_PERMANENT_STATES):
        return StoreMisconfigured(f"PostgreSQL: {message}")
    if state.startswith(_TRANSIENT_STATES):
        return StoreUnavailable(f"PostgreSQL is unavailable: {message}")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        lowered = message.lower()
        if not state and any(marker in lowered for marker in _PERMANENT_CONNECT):
            return StoreMisconfigured(f"PostgreSQL: {message}")
        return StoreUnavailable(f"PostgreSQL is unavailable: {message}")
    if isinstance(exc, psycopg.ProgrammingError) and "invalid" in message.lower():
        return StoreMisconfigured(f"PostgreSQL: {message}")
    return StoreError(f"PostgreSQL: {message}")


def from_sqlite(exc: BaseException) -> StoreError:
    """The classified error for a sqlite3 exception."""
    if isinstance(exc, StoreError):
        return exc
    message = _first_line(exc)
    lowered = message.lower()
    if "locked" in lowered or "busy" in lowered:
        return StoreLocked(f"SQLite: {message} (another process holds the write lock)")
    if isinstance(exc, sqlite3.OperationalError) and (
        "unable to open" in lowered or "no such table" in lowered or "no such column" in lowered
    ):
        return StoreMisconfigured(f"SQLite: {message}")
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in lowered:
        return StoreMisconfigured(f"SQLite: {message}")
    if "disk i/o" in lowered or "disk is full" in lowered:
        return StoreUnavailable(f"SQLite: {message}")
    return StoreError(f"SQLite: {message}")
