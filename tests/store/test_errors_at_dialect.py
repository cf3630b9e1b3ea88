"""ARCHITECTURE rule 11 at the dialect boundary: whatever path a driver error takes (a read, a
write, a transaction, a listener), it leaves the store classified, never as a driver type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentqueue.domain.errors import StoreError, StoreMisconfigured
from agentqueue.store import make_store
from agentqueue.store.base import CHANNEL_PENDING, TaskFilter

FreshUrls = Callable[[], str]


async def test_an_unmigrated_database_is_misconfigured_on_every_path(
    fresh_db_urls: FreshUrls,
) -> None:
    store = make_store(fresh_db_urls())
    await store.open(migrate=False)
    try:
        with pytest.raises(StoreMisconfigured):
            await store.list_tasks(TaskFilter())  # a read
        with pytest.raises(StoreMisconfigured):
            await store.resign("scheduler", "me")  # a write of its own
        with pytest.raises(StoreMisconfigured):
            async with store.transaction() as tx:  # a statement inside a transaction
                await tx.load_and_tenants(1)
        with pytest.raises(StoreMisconfigured):
            async with store.audit_snapshot() as snapshot:  # a snapshot
                [head async for head in snapshot.heads]
    finally:
        await store.close()


async def test_a_sqlite_listener_that_cannot_open_the_file_is_classified(tmp_path: Path) -> None:
    store = make_store(f"sqlite:///{tmp_path}/missing/queue.db")
    with pytest.raises(StoreError) as caught:
        async with store.listen([CHANNEL_PENDING]):
            pass
    assert isinstance(caught.value, StoreMisconfigured)
