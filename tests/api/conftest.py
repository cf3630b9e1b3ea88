"""Fixtures of the HTTP API tests: a real ``agentqueue api`` process per database kind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from http_server import ApiServer, running_server

MAIN_API_SETTINGS = {
    "requests_per_minute": 0,  # no rate limit: the matrix and schema runs make many requests
    "token_cache_secs": 1,
}


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A running ``agentqueue api`` over a fresh SQLite file and over a fresh PostgreSQL
    database, shared by the tests of one module; no rate limit, tokens trusted for 1 s."""
    kind = request.param
    directory = tmp_path_factory.mktemp(f"api-{kind}")
    with running_server(kind, directory, MAIN_API_SETTINGS) as found:
        yield found
