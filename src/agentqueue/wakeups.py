"""Waking up on events and notices, shared by the worker and the scheduler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from .domain.errors import StoreError
from .store.base import Notice, Store
from .supervise import Outage

log = logging.getLogger("agentqueue.worker")


async def wait_event(event: asyncio.Event, timeout_secs: float) -> bool:
    """Wait for ``event`` at most ``timeout_secs``; True if it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it can hang a task that is cancelled just as the
    event is set, which is exactly how a loop stops.
    """
    try:
        async with asyncio.timeout(timeout_secs):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def follow(
    store: Store, channels: Sequence[str], on_notice: Callable[[Notice], None], who: str
) -> None:
    """Hand every notice on ``channels`` to ``on_notice`` until cancelled. When the listener
    drops (a database error), reconnect after a pause that grows while the database stays
    away, saying so once (the caller's regular poll covers the gap). Any other error is
    raised: it is a bug, and the caller's supervisor reports it."""
    outage = Outage(log)
    while True:
        try:
            async with store.listen(channels) as notices:
                outage.ok(f"{who} listening")
                async for notice in notices:
                    on_notice(notice)
        except StoreError as exc:
            await outage.wait(exc, f"{who} listener reconnecting")
