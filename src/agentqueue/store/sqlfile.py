"""Named queries: each dialect's ``queries/*.sql`` files, split by concern (ARCHITECTURE rule 4).

A query starts with ``-- name: some_name`` and, on the next line, a ``-- `` line describing it;
its SQL runs to the next name. Comments above a file's first name describe the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class NamedQuery:
    """One query: its name, its one-line description, its SQL and the file it is in."""

    name: str
    description: str
    sql: str
    source: str


def parse_named_queries(text: str, source: str = "") -> dict[str, NamedQuery]:
    """Split ``text`` into its queries by name. A name defined twice is an error."""
    queries: dict[str, NamedQuery] = {}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        name = match.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {source or 'one file'}")
        body = text[match.end() : end].strip()
        first, _, rest = body.partition("\n")
        description = first[2:].strip() if first.startswith("-- ") else ""
        sql = rest if description else body
        queries[name] = NamedQuery(name, description, sql.strip().rstrip(";").strip(), source)
    return queries


def shipped_folder(dialect: str, kind: str) -> Traversable:
    """The folder of a dialect's shipped SQL files (``queries`` or ``migrations``): read from
    the installed package's directory, or, for a package run from a zip archive, through
    importlib.resources (imported only then: it loads zipfile and the compressors, a few
    milliseconds of every command's start)."""
    folder = Path(__file__).parent / dialect / kind
    if folder.is_dir():
        return folder
    from importlib import resources

    return resources.files("agentqueue.store").joinpath(dialect, kind)


@cache
def named_queries(dialect: str) -> dict[str, NamedQuery]:
    """Every named query of one dialect (``sqlite`` or ``postgres``), from all its files."""
    folder = shipped_folder(dialect, "queries")
    found: dict[str, NamedQuery] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, query in parse_named_queries(entry.read_text(), entry.name).items():
            if name in found:
                raise ValueError(
                    f"{dialect} query {name!r} is defined in {found[name].source} and {entry.name}"
                )
            found[name] = query
    return found


def without_comment_lines(sql: str) -> str:
    """``sql`` less its lines that hold only a comment, and the indentation of the others:
    what the files explain and lay out is not sent. Shorter text is cheaper to send and to
    parse, and psycopg converts a query's placeholders once and keeps the result only for
    queries of up to 4 KiB (the claim is longer with its comments). A comment after code on its
    line stays (a ``--`` in a string would look like one); no query continues a string literal
    over a line, so leading blanks are never inside one (a test holds every query to that)."""
    lines = (line.lstrip() for line in sql.split("\n"))
    return "\n".join(line for line in lines if not line.startswith("--"))


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The SQL of each named query of one dialect, read once, as it is sent (see
    without_comment_lines)."""
    return {name: without_comment_lines(q.sql) for name, q in named_queries(dialect).items()}
