"""An idle worker on SQLite stays cheap: its listener looks for commits at the idle pace while
the only commits are the process's own bookkeeping (lease renewals and its presence record, the
writes an idle worker makes), and at the fast pace again after any other commit."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentqueue.store import make_store
from agentqueue.store.base import CHANNEL_PENDING
from agentqueue.store.sqlite import dialect as sqlite_dialect

FAST, IDLE = 0.01, 0.05
WITHIN = 30.0


async def test_own_bookkeeping_keeps_the_listener_idle_and_other_commits_wake_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(f"sqlite:///{tmp_path / 'q.db'}")
    await store.migrate()
    d = store._d  # type: ignore[attr-defined]
    d.listen_interval_secs, d.listen_idle_interval_secs, d.listen_idle_after_secs = FAST, IDLE, 0.2
    paces: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(secs: float) -> None:  # records the pace the listener chose
        paces.append(secs)
        await real_sleep(secs)

    monkeypatch.setattr(sqlite_dialect.asyncio, "sleep", sleep)

    async def next_paces(n: int) -> list[float]:
        start = len(paces)
        async with asyncio.timeout(WITHIN):
            while len(paces) < start + n:
                await real_sleep(0.005)
        return paces[start : start + n]

    async def until_idle() -> None:
        async with asyncio.timeout(WITHIN):
            while not paces or paces[-1] != IDLE:
                await real_sleep(0.005)

    heard: list[object] = []

    async def heard_more(than: int) -> None:
        async with asyncio.timeout(WITHIN):
            while len(heard) <= than:
                await real_sleep(0.005)

    now = datetime.now(UTC)
    try:
        async with store.listen([CHANNEL_PENDING]) as notices:

            async def consume() -> None:
                async for notice in notices:
                    heard.append(notice)

            consumer = asyncio.ensure_future(consume())
            try:
                await until_idle()
                # The worker's own presence record, a scheduler lease renewal: heard, still idle.
                await store.record_worker("w1", 4, 0, now)
                await store.lead("scheduler", "w1", now, 30.0)
                await heard_more(0)
                assert set(await next_paces(3)) == {IDLE}
                # Any other commit (here a pause, which workers must hear at once): fast again.
                before = len(heard)
                await store.pause("docs", "ops", "incident", now)
                await heard_more(before)
                assert (await next_paces(1)) == [FAST]
            finally:
                consumer.cancel()
    finally:
        await store.close()
