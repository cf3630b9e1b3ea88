"""What every service function works with: the store, the settings, the clock, randomness."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clock import Clock, SystemClock
from ..config import Settings
from ..store import Store


@dataclass
class Runtime:
    """The injected parts. ``spread`` draws the jitter of backoff delays."""

    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    spread: Callable[[], float] = random.random
