"""Time, injected (ARCHITECTURE rule 6): aging, backoff, leases and retention read a Clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current time as an aware UTC datetime."""

    def now(self) -> datetime:
        """The current time."""
        ...


class SystemClock:
    """The wall clock, truncated to microseconds as both stores keep it."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to, for tests of time-dependent rules."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time this clock was last set to."""
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Move forward by ``seconds`` (or any timedelta keywords) and return the new time."""
        with self._lock:
            self._now += timedelta(seconds=seconds, **delta)
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when``."""
        with self._lock:
            self._now = when
