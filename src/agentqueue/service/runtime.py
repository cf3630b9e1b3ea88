"""What every service function works with: the store, the settings, the clock, randomness."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..clock import Clock, SystemClock
from ..store import Store
from ..store.base import CandidateQuery, WorkHints

if TYPE_CHECKING:
    from ..config import Settings
    from ..pipelines import Pipelines


class Runtime:
    """The injected parts. ``spread`` draws the jitter of backoff delays.

    ``settings`` are the settings in force, or a function that builds them when they are first
    read. So a command that never reads them (``list`` with no configuration) never loads their
    models, nor pydantic."""

    def __init__(
        self,
        store: Store,
        settings: Settings | Callable[[], Settings],
        clock: Clock | None = None,
        spread: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self._settings = settings
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.spread = spread
        self.paused_cache: tuple[float, frozenset[str]] | None = None
        """Paused task types as last read (monotonic time, types): submit consults them to
        leave a paused type pending; claims filter paused types in the database, so a
        short-lived copy never lets a paused task run."""
        self.hints_read: tuple[float, WorkHints] | None = None
        """The work hints as last read (monotonic time of the read, hints), see work_hints."""
        self.built_pipelines: Pipelines | None = None
        self.candidates_read: CandidateQuery | None = None
        """The candidates the last routed admission pass read: the next one reads the same
        ahead, with its load (see scheduler.admission)."""

    @property
    def settings(self) -> Settings:
        """The settings in force (built now, if they were given as a function)."""
        given = self._settings
        if callable(given):
            given = self._settings = given()
        return given

    @property
    def settings_built(self) -> bool:
        """Whether the settings have been built (or were given built)."""
        return not callable(self._settings)

    @property
    def pipelines(self) -> Pipelines:
        """The pipeline of every kind, built from the settings on first use."""
        if self.built_pipelines is None:
            from ..pipelines import Pipelines

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
