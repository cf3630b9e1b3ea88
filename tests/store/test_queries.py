"""Named queries (ARCHITECTURE rule 4): one name means one operation in both dialects, and every
query says in one line what it does."""

from __future__ import annotations

import pytest

from agentqueue.store.sqlfile import (
    load_queries,
    named_queries,
    parse_named_queries,
    without_comment_lines,
)

POSTGRES_ONLY = {
    "admission_lock",  # an advisory lock; SQLite's BEGIN IMMEDIATE already holds the one writer
    "commit_durably",  # undoes what admission_lock relaxes; SQLite relaxes nothing
    # The planner's settings around the admission's candidates (their plan made once per
    # connection); SQLite plans each statement once per prepared statement anyway
    "fixed_plan",
    "fixed_plan_back",
    "migration_lock",  # likewise, for migrations
    "notify",  # push notifications; SQLite listeners watch PRAGMA data_version
    "listen",
    # The open transactions that write events, which the anchoring step waits for; SQLite has
    # one writer at a time, never open while another reads
    "event_writers",
    "event_writers_left",
    # The hashes of a range of events joined in number order, in one row; SQLite's group_concat
    # keeps no order it promises, so its anchoring step reads the events a row each
    "events_hashed",
    # A transaction's BEGIN, sent with its first statement, and its end; SQLite's writer begins
    # with BEGIN IMMEDIATE in its dialect
    "begin",
    "commit",
    "rollback",
    # A claim that admits (Settings.claims_admit): the room counted under the admission lock,
    # then one row update admitting and claiming; SQLite admits first (admit_for_claim)
    "claim_room",
    "claim_admitting",
}
SQLITE_ONLY = {
    # Events (and a purged task's output) written in a statement of their own after the write
    # that returned the ids; PostgreSQL does it in the write's one statement.
    "insert_events",
    "claim_events",
    "admit_events",
    "complete_events",
    "purge_logs",
    # The first step of a claim that admits (Settings.claims_admit): SQLite admits what the
    # claim after it may take; PostgreSQL counts the room (claim_room) and admits and claims
    # in one row update (claim_admitting).
    "admit_for_claim",
}


def test_both_dialects_define_the_same_query_names() -> None:
    sqlite, postgres = set(named_queries("sqlite")), set(named_queries("postgres"))
    assert sqlite - postgres == SQLITE_ONLY
    assert postgres - sqlite == POSTGRES_ONLY


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_every_query_has_a_one_line_description(dialect: str) -> None:
    for name, query in named_queries(dialect).items():
        assert query.description, f"{dialect} query {name} ({query.source}) has no description"
        assert not query.sql.startswith(f"-- {query.description}")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_concern_is_in_one_file_in_both_dialects(dialect: str) -> None:
    files = {name: q.source for name, q in named_queries(dialect).items()}
    other = named_queries("postgres" if dialect == "sqlite" else "sqlite")
    for name, source in files.items():
        if name in other:
            assert other[name].source == source, name


def test_a_name_defined_twice_is_refused() -> None:
    text = "-- name: one\n-- The first.\nSELECT 1\n\n-- name: one\n-- Again.\nSELECT 2\n"
    with pytest.raises(ValueError, match="defined twice"):
        parse_named_queries(text, "tasks.sql")


def test_the_description_is_not_part_of_the_sql() -> None:
    [query] = parse_named_queries("-- name: one\n-- The first.\n-- why\nSELECT 1;\n").values()
    assert (query.description, query.sql) == ("The first.", "-- why\nSELECT 1")


PSYCOPG_CACHED_LENGTH = 4096
"""psycopg converts a query's named placeholders once and keeps the result only for a query of
up to this many bytes (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``); a longer one is
parsed again at every execution."""


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_queries_are_sent_without_their_comment_lines(dialect: str) -> None:
    sent = load_queries(dialect)
    for name, query in named_queries(dialect).items():
        lines = sent[name].split("\n")
        assert not [line for line in lines if line.lstrip().startswith("--")], name
        # Only the comment lines and the indentation go: the code lines are the file's, in
        # order.
        code = [line.lstrip() for line in query.sql.split("\n")]
        assert lines == [line for line in code if not line.startswith("--")], name


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_no_query_continues_a_string_over_a_line(dialect: str) -> None:
    """Indentation is dropped from what is sent: safe only while no string literal (nor a
    quoted name) spans lines, so that no blank dropped was inside one."""
    for name, query in named_queries(dialect).items():
        for line in query.sql.split("\n"):
            assert _open_quote(line) is None, (name, line)


def _open_quote(line: str) -> str | None:
    """The quote a line leaves open at its end (None: none), up to a comment outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote is None and line.startswith("--", i):
            break
        if char in "'\"" and quote in (None, char):
            quote = None if quote == char else char
    return quote


def test_an_open_quote_is_seen() -> None:
    assert _open_quote("SELECT 'a -- b") == "'"
    assert _open_quote("SELECT 'it''s' -- it's") is None
    assert _open_quote('SELECT "a b" FROM t') is None


def test_every_postgres_query_is_short_enough_for_the_drivers_cache() -> None:
    too_long = {
        name: len(sql.encode())
        for name, sql in load_queries("postgres").items()
        if len(sql.encode()) > PSYCOPG_CACHED_LENGTH
    }
    assert not too_long


def test_a_comment_after_code_stays() -> None:
    text = "SELECT 1  -- one\n    -- why\n    FROM t -- a '--' in a string looks like this"
    assert without_comment_lines(text) == (
        "SELECT 1  -- one\nFROM t -- a '--' in a string looks like this"
    )
