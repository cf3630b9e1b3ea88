"""Priorities (R4): numbers 0-9 with the names P0, P1, P2, the P0 lane, and aging.

Lower numbers run first. P0 tasks (priority 0: payments, deletions, permission changes) form a lane
of their own that is always served first. Every other task ages: its effective priority drops by
one for every ``aging_interval`` it has waited, but never below 1, so no aged task enters the P0
lane. Ties go to the task that became eligible first, then to the one submitted first.
"""

from __future__ import annotations

import math
from datetime import datetime

from .errors import InvalidInput

MIN_PRIORITY = 0
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5
DEFAULT_AGING_INTERVAL_SECS = 600.0

NAMES: dict[str, int] = {"P0": 0, "P1": 5, "P2": 9}
"""The named levels of SPEC section 1."""

P0_LANE = 0
NORMAL_LANE = 1


def parse_priority(value: object, field: str = "priority") -> int:
    """Turn ``3``, ``"3"``, ``"P0"`` or ``"p2"`` into a priority number, or raise InvalidInput."""
    if isinstance(value, bool):
        raise InvalidInput(f"must be 0-9 or P0/P1/P2, got {value!r}", field)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if text.upper() in NAMES:
            return NAMES[text.upper()]
        if not (text.isascii() and text.lstrip("-").isdigit()):
            raise InvalidInput(f"must be 0-9 or P0/P1/P2, got {value!r}", field)
        number = int(text)
    else:
        raise InvalidInput(f"must be 0-9 or P0/P1/P2, got {value!r}", field)
    if not MIN_PRIORITY <= number <= MAX_PRIORITY:
        raise InvalidInput(f"must be 0-9 or P0/P1/P2, got {number}", field)
    return number


def priority_name(priority: int) -> str:
    """The display name: ``P0``, ``P1`` or ``P2`` for the named levels, else the number."""
    for name, number in NAMES.items():
        if number == priority:
            return name
    return str(priority)


def lane(priority: int) -> int:
    """0 for the P0 lane, 1 for everything else."""
    return P0_LANE if priority == 0 else NORMAL_LANE


def effective_priority(
    priority: int, waited_secs: float, aging_interval_secs: float = DEFAULT_AGING_INTERVAL_SECS
) -> int:
    """``priority - floor(wait / aging_interval)``, held at 1 outside the P0 lane."""
    if priority == 0:
        return 0
    steps = math.floor(max(waited_secs, 0.0) / aging_interval_secs) if aging_interval_secs else 0
    return max(1, priority - steps)


def order_key(
    priority: int,
    eligible_at: datetime,
    seq: int,
    now: datetime,
    aging_interval_secs: float = DEFAULT_AGING_INTERVAL_SECS,
) -> tuple[int, int, datetime, int]:
    """The order tasks are admitted and claimed in: lane, aged priority, eligible_at, seq.

    Both stores implement this order in SQL; a property test holds them to this function.
    """
    waited = (now - eligible_at).total_seconds()
    return (
        lane(priority),
        effective_priority(priority, waited, aging_interval_secs),
        eligible_at,
        seq,
    )
