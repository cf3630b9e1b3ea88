"""Storage: the only package that imports a database driver (ARCHITECTURE rule 1)."""

from __future__ import annotations

from ..domain.errors import InvalidInput
from .base import Change, DedupKey, Lease, NewTask, Store, TaskFilter, TaskHead, Tx

DEFAULT_URL = "sqlite:///agentqueue.db"


def make_store(url: str) -> Store:
    """The store for a database URL: ``sqlite:///file.db`` or ``postgresql://...``."""
    if url.startswith("sqlite:"):
        from .sqlite.dialect import sqlite_store

        return sqlite_store(url)
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
    "make_store",
]
