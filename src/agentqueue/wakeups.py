"""Waking up on events and notices, shared by the worker and the scheduler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from .store.base import Notice, Store

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
    """Hand every notice on ``channels`` to ``on_notice`` until cancelled; when the listener
    drops, reconnect after a pause (the caller's regular poll covers the gap)."""
    while True:
        try:
            async with store.listen(channels) as notices:
                async for notice in notices:
                    on_notice(notice)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s listener lost (%s); reconnecting", who, exc)
            await asyncio.sleep(1.0)
