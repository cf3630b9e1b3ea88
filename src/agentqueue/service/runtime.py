"""What every service function works with: the store, the settings, the clock, randomness."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clock import Clock, SystemClock
from ..config import Settings
from ..pipelines import Pipelines
from ..store import Store
from ..store.base import CandidateQuery, WorkHints


@dataclass
class Runtime:
    """The injected parts. ``spread`` draws the jitter of backoff delays."""

    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    spread: Callable[[], float] = random.random
    paused_cache: tuple[float, frozenset[str]] | None = None
    """Paused task types as last read (monotonic time, types): submit consults them to leave a
    paused type pending; claims filter paused types in the database, so a short-lived copy
    never lets a paused task run."""

    hints_read: tuple[float, WorkHints] | None = None
    """The work hints as last read (monotonic time of the read, hints), see work_hints."""

    built_pipelines: Pipelines | None = None
    candidates_read: CandidateQuery | None = None
    """The candidates the last routed admission pass read: the next one reads the same ahead,
    with its load (see scheduler.admission)."""

    @property
    def pipelines(self) -> Pipelines:
        """The pipeline of every kind, built from the settings on first use."""
        if self.built_pipelines is None:
            self.built_pipelines = Pipelines(self.settings)
        return self.built_pipelines

    async def work_hints(self, max_age_secs: float = 0.0) -> WorkHints:
        """What work exists (Store.work_hints): read now, or the hints a read at most
        ``max_age_secs`` ago found. The scheduler's pass reads them afresh every tick; an idle
        worker's poll, a safety net behind the notices, takes those (one read a second where
        there were two), and the cron step looks in them for the next slot."""
        read = self.hints_read
        if read is not None and time.monotonic() - read[0] < max_age_secs:
            return read[1]
        started = time.monotonic()
        hints = await self.store.work_hints(self.clock.now())
        self.hints_read = (started, hints)
        return hints

    async def paused_types(self, max_age_secs: float = 1.0) -> frozenset[str]:
        """The paused task types, read at most once every ``max_age_secs``."""
        cached = self.paused_cache
        if cached is not None and time.monotonic() - cached[0] < max_age_secs:
            return cached[1]
        types = frozenset(p.task_type for p in await self.store.paused())
        self.paused_cache = (time.monotonic(), types)
        return types
