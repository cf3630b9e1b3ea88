"""The Dialect interface: what one database brings to the operations of ``sql.py`` and
``tx.py`` (connections and transactions, named queries on a session, notices, a consistent
snapshot, the migration primitives). ``sqlite/dialect.py`` and ``postgres/dialect.py`` implement
it; an operation never sees a driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from .base import Later, Notice
from .migrate import Migration
from .rows import Codec, Row


class Session(Protocol):
    """Named queries on one connection, in whatever transaction it is in. Driver errors leave
    every method classified (store/errors.py)."""

    async def fetch(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run ``query`` and return its rows."""
        ...

    async def fetch_table(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[Sequence[Any]]]:
        """Run ``query``; its column names, once, and its rows as sequences of values in
        that order (no name-keyed row built for each: for statements returning many rows of
        many columns, such as a claim)."""
        ...

    async def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run ``query`` for its effect; return how many rows it touched."""
        ...

    async def fetch_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[list[Row]]:
        """Run ``query`` later (with the transaction's next statement, at the latest with its
        COMMIT, where the database is across a network; else now); its rows, once it has run.
        For a transaction's statements only (a session outside one has no COMMIT to wait
        for)."""
        ...

    async def fetch_table_later(
        self, query: str, params: Mapping[str, Any] | None = None
    ) -> Later[tuple[list[str], list[Sequence[Any]]]]:
        """Run ``query`` later (with the transaction's next statement, at the latest with its
        COMMIT, where the database is across a network; else now); its column names and rows
        as :meth:`fetch_table` gives them, once it has run."""
        ...

    async def fetch_each(
        self, queries: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> list[list[Row]]:
        """Run independent queries in order and return each one's rows (one round trip for
        all, where the database is across a network)."""
        ...

    async def lock_admission(self, relaxed: bool) -> None:
        """Take the one turn to admit under limits until this transaction ends, at the latest
        before the transaction's next statement runs; ``relaxed``, its commit need not wait for
        the disk."""
        ...

    async def commit_durably(self) -> None:
        """Make this transaction's commit wait for the disk after all (it claims tasks), at the
        latest from its next statement or its COMMIT."""
        ...


class Dialect(Protocol):
    """What one database brings: connections, transactions, notices and the migration
    primitives. Operations never see a driver."""

    name: str
    """``sqlite`` or ``postgres``: which queries and migrations to use."""
    push_notifications: bool
    separate_writer: bool
    codec: Codec
    orders_in_sql: bool
    """True when ``claim`` and ``admit`` return their rows in claim order already."""
    joins_in_order: bool
    """True when the database can join a range of events' hashes in number order in one row
    (``events_hashed``); else the anchoring step reads them a row each."""
    admitting_claim: tuple[str, str]
    """A claim that admits (ClaimParams.admit), after the admission lock: the statement that
    takes the room, then the claim, whose rows come back in no order."""

    @property
    def commits(self) -> int:
        """Write transactions this process has committed through the dialect (a command that
        met a lock is run again only when none of its writes was saved)."""
        ...

    async def open(self, wait_secs: float | None = None) -> None:
        """Connect: a permanent fault fails at once, a passing one is waited on for up to
        ``wait_secs`` (None: the dialect's default) before StoreUnavailable."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    def read(self) -> AbstractAsyncContextManager[Session]:
        """A session for reads that take no write lock."""
        ...

    def write(self, *, renewal: bool = False) -> AbstractAsyncContextManager[Session]:
        """A session for writes that need no transaction around them: each statement (with its
        follow-ups) commits by itself, in one hop or round trip. Work on its answer belongs after
        the context, which may hold the file's one writer (SQLite). ``renewal`` marks a write
        that is only bookkeeping (a lease renewal, a worker's presence)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Session]:
        """A write transaction: commits on success, rolls back on error."""
        ...

    async def settled_number(self) -> int:
        """The highest global number (events take theirs as they are written) such that every
        transaction that could still hold a number up to it has ended: each number up to it
        is a committed event or none, for good."""
        ...

    def listen(self, channels: Sequence[str]) -> AbstractAsyncContextManager[AsyncIterator[Notice]]:
        """Notices while the context is open (see Store.listen)."""
        ...

    def snapshot(
        self, *queries: str
    ) -> AbstractAsyncContextManager[tuple[AsyncIterator[Row], ...]]:
        """The rows of each query, streamed, all read from one consistent snapshot."""
        ...

    async def applied_versions(self) -> set[int]:
        """Migration versions applied (creating the version table if needed)."""
        ...

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration and record it, under a lock; False if another process did."""
        ...
