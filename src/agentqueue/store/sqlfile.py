"""Named queries: a .sql file holds blocks that start with ``-- name: some_name``."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_named_queries(text: str) -> dict[str, str]:
    """Split ``text`` into {name: sql}. Comments above the first name are ignored."""
    queries: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        name = match.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        body = text[match.end() : end].strip()
        queries[name] = body.rstrip(";").strip()
    return queries


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The named queries of one dialect (``sqlite`` or ``postgres``), read once."""
    text = resources.files("agentqueue.store").joinpath(dialect, "queries.sql").read_text()
    return parse_named_queries(text)
