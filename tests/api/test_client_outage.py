"""A database the API server cannot reach is StoreUnavailable at the client (503), not the
server being away (ServerUnreachable); when the database is back, so are the answers. On a
private PostgreSQL server that the test stops and starts (never the shared one)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
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


async def _stream_through_outage(pg: PgInstance, server_url: str, token: str, db: str) -> None:
    from agentqueue import AsyncQueue

    queue = AsyncQueue(db, actor="driver")
    await queue.open()
    try:
        made = (await queue.submit(title="Streamed", task_type="outage-stream")).task
        await queue.admit()
        [task] = await queue.claim(1, "w1", task_types=["outage-stream"])
        assert task.lock_token is not None
        seen: list[dict[str, object]] = []
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server_url, headers=headers, timeout=None) as http:

            async def read() -> None:
                url = f"/v1/tasks/{made.id}/events"
                async with http.stream("GET", url, params={"stream": "true"}) as answer:
                    async for line in answer.aiter_lines():
                        if line.startswith("data: "):
                            seen.append(json.loads(line.removeprefix("data: ")))

            reading = asyncio.create_task(read())
            deadline = time.monotonic() + BACK_SECS
            while len(seen) < 3:  # created, admitted, claimed
                assert time.monotonic() < deadline, seen
                await asyncio.sleep(0.05)
            pg.stop()
            try:
                await asyncio.sleep(2)
                assert not reading.done(), "the stream ended during the outage"
            finally:
                pg.start()
            while True:
                try:
                    await queue.complete(task.id, task.lock_token, {"ok": True})
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.2)
            await asyncio.wait_for(reading, BACK_SECS)
        listed = [e.to_json() for e in await queue.events(made.id)]
        assert seen == listed and seen[-1]["to"] == "completed"
    finally:
        await queue.close()


def test_an_event_stream_outlives_a_database_outage(pg: PgInstance, tmp_path: Path) -> None:
    """A client streaming a task's events while the database stops and starts again keeps
    its stream, and gets every event (the completion written after the outage included) in
    order, the stream ending after the terminal one."""
    db = pg.create_database("aq_api_stream_outage")
    with running_server(
        "postgres", tmp_path, CLIENT_API_SETTINGS, CLIENT_CONFIG, db_url=db
    ) as server:
        asyncio.run(_stream_through_outage(pg, server.url, server.admin_secret, db))
