"""What the SQLite writer tests share: whether a process is alive, the workers a file holds, and
a writer process killed in the middle of a transaction."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentqueue import AsyncQueue
from agentqueue.domain.errors import StoreUnavailable


def stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name: state, parent, ..."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False


def worker_names(path: Path) -> list[str]:
    """The names in aq_workers, in order."""
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM aq_workers ORDER BY name")]
    finally:
        conn.close()


async def killed_mid_transaction(
    queue: AsyncQueue, writer_pid: Callable[[], int], path: Path
) -> None:
    """Kill the writer process (``writer_pid``) while it holds a transaction: the transaction
    fails as when a database server goes away, what it wrote is rolled back, and the next write
    starts another process."""
    store = queue.store
    d = store._d  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    await store.record_worker("before", 1, 0, now)
    first = writer_pid()
    with pytest.raises(StoreUnavailable, match="writer process ended"):
        async with d.transaction() as s:
            await s.execute("record_worker", d.codec.params(name="in-tx", slots=1, busy=0, now=now))
            os.kill(first, signal.SIGKILL)
            await s.execute("record_worker", d.codec.params(name="after", slots=1, busy=0, now=now))
    await store.record_worker("later", 1, 0, now)
    second = writer_pid()
    assert second != first and alive(second) and not alive(first)
    assert worker_names(path) == ["before", "later"]
    assert (await queue.verify()).ok
