"""A database the API server cannot reach is StoreUnavailable at the client (503), not the
server being away (ServerUnreachable); when the database is back, so are the answers. On a
private PostgreSQL server that the test stops and starts (never the shared one)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from http_server import CLIENT_API_SETTINGS, CLIENT_CONFIG, running_server

from agentqueue import AsyncClient, Client, ServerUnreachable, StoreUnavailable
from pg_instance import PgInstance

pytestmark = pytest.mark.postgres
BACK_SECS = 120.0
"""The most the answers may take to come back once the database is up (generous)."""


async def _stats(url: str, token: str) -> None:
    async with AsyncClient(url, token) as aq:
        await aq.stats()


def test_a_database_away_is_store_unavailable_then_answers_again(
    pg: PgInstance, tmp_path: Path
) -> None:
    db = pg.create_database("aq_api_outage")
    with (
        running_server(
            "postgres", tmp_path, CLIENT_API_SETTINGS, CLIENT_CONFIG, db_url=db
        ) as server,
        Client(server.url, server.admin_secret) as aq,
    ):
        made = aq.submit(title="Before the outage", task_type="outage").task
        pg.stop()
        try:
            with pytest.raises(StoreUnavailable) as caught:
                aq.get(made.id)
            assert not isinstance(caught.value, ServerUnreachable)
            assert "database" in str(caught.value)
            with pytest.raises(StoreUnavailable):
                asyncio.run(_stats(server.url, server.admin_secret))
        finally:
            pg.start()
        deadline = time.monotonic() + BACK_SECS
        while True:
            try:
                assert aq.get(made.id).title == "Before the outage"
                break
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
