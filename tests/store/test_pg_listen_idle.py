"""A PostgreSQL listener waits on its socket alone: while no notice comes it keeps no timer on
the event loop (psycopg's own wait wakes every 0.1 s, ten wake-ups a second of an idle worker for
nothing), a notice sent meanwhile arrives, and so does one sent between two reads, and the
listener still ends with an error the worker's follower reconnects on when the server ends its
connection."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentqueue import AsyncQueue, StoreUnavailable
from agentqueue.store.base import Notice

pytestmark = pytest.mark.postgres

CHANNEL = "aq_listen_idle_test"


def timers(loop: asyncio.AbstractEventLoop) -> int:
    """Timer handles waiting on the loop, cancelled ones left out."""
    scheduled = loop._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled())


async def test_an_idle_listener_keeps_no_timer_and_hears_every_notice(pg_url: str) -> None:
    loop = asyncio.get_running_loop()
    heard: list[Notice] = []
    got = asyncio.Event()
    async with AsyncQueue(pg_url) as queue, queue.store.listen([CHANNEL]) as notices:

        async def collect() -> None:
            async for notice in notices:
                heard.append(notice)
                got.set()

        before = timers(loop)
        listener = asyncio.create_task(collect())
        try:
            await asyncio.sleep(0.3)  # the listener waits, with nothing to hear
            assert timers(loop) == before
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("SELECT pg_notify(%s, 'one')", [CHANNEL])
                await asyncio.wait_for(got.wait(), 10)
                got.clear()
                conn.execute("SELECT pg_notify(%s, 'two')", [CHANNEL])
                conn.execute("SELECT pg_notify(%s, 'three')", [CHANNEL])
                for _ in range(500):
                    if len(heard) == 3:
                        break
                    await asyncio.sleep(0.02)
            assert [n.payload for n in heard] == ["one", "two", "three"]
            assert {n.channel for n in heard} == {CHANNEL}
            await asyncio.sleep(0.3)
            assert timers(loop) == before
        finally:
            listener.cancel()
            with pytest.raises(asyncio.CancelledError):
                await listener


async def test_a_listener_whose_connection_the_server_ends_raises_store_unavailable(
    pg_url: str,
) -> None:
    async with AsyncQueue(pg_url) as queue, queue.store.listen([CHANNEL]) as notices:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                # This database's listener only: the server is shared by the suite's processes.
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE %s "
                "AND pid <> pg_backend_pid()",
                [f"%LISTEN%{CHANNEL}%"],
            )
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(anext(notices), 10)
