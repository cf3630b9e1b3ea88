"""Storage: the only package that imports a database driver (ARCHITECTURE rule 1).

The protocol names of ``base`` are loaded when first used (PEP 562): ``agentqueue --help`` needs
only DEFAULT_URL (start-up time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain.errors import InvalidInput
from ..lazy import lazy_names

if TYPE_CHECKING:
    from .base import Change, DedupKey, Lease, NewTask, Store, TaskFilter, TaskHead, Tx

DEFAULT_URL = "sqlite:///agentqueue.db"


_WHERE = dict.fromkeys(
    ("Change", "DedupKey", "Lease", "NewTask", "Store", "TaskFilter", "TaskHead", "Tx"), "base"
)
"""The module each lazily loaded name lives in (relative to this package)."""

__getattr__ = lazy_names(__name__, _WHERE, globals())


def describe_url(url: str) -> str:
    """Which database a URL names, fit to print: ``sqlite PATH`` or ``postgresql
    HOST:PORT/DBNAME`` (never its user, password or query)."""
    from urllib.parse import urlsplit

    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:").split("?", 1)[0]
        return f"sqlite {path[3:] if path.startswith('///') else path.lstrip('/') or path}"
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        try:
            port = parts.port or 5432
        except ValueError:
            port = 5432
        host = parts.hostname or "localhost"
        return f"postgresql {host}:{port}/{parts.path.lstrip('/') or parts.username or ''}"
    return url.split("://", 1)[0] + "://..." if "://" in url else "(no scheme)"


def make_store(url: str, *, sqlite_writer: str | None = None) -> Store:
    """The store for a database URL: ``sqlite:///file.db`` or ``postgresql://...``.
    ``sqlite_writer`` is where SQLite's writer connection lives (``thread``, the default,
    ``process`` or ``auto``) unless the URL's ``?writer=`` says."""
    if url.startswith("sqlite:"):
        from .sqlite.dialect import sqlite_store

        return sqlite_store(url, writer=sqlite_writer)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres.dialect import postgres_store

        return postgres_store(url)
    shown = url.split("://", 1)[0] + "://..." if "://" in url else "(no scheme)"
    raise InvalidInput(
        f"unsupported database URL {shown}: use sqlite:///path.db or postgresql://...", "db"
    )


__all__ = [
    "DEFAULT_URL",
    "Change",
    "DedupKey",
    "Lease",
    "NewTask",
    "Store",
    "TaskFilter",
    "TaskHead",
    "Tx",
    "describe_url",
    "make_store",
]
