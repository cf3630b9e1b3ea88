"""Cron slots (R18): when a schedule fires, in its time zone, and which missed slots fire.

Pure: no I/O and no clock; every function is handed the time it reasons about.

A cron expression names wall-clock times in the schedule's zone (``0 9 * * *`` is 09:00 there).
Each such wall-clock time is a *slot*, at the UTC instant it stands for. Around daylight-saving
changes:

- a wall-clock time that happens twice (clocks go back) is one slot, at its first occurrence;
- a wall-clock time that never happens (clocks go forward) moves to the end of the gap, where it
  is one slot with any other slot already there.

So slot instants never repeat and never go backwards, in any zone: a slot fires once at most.

croniter is imported when an expression is first read: a worker whose database holds no
schedule never loads it (with dateutil, about a tenth of a worker's start).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..domain.errors import FieldProblem
from ..domain.schedule import CatchUp

MISFIRE_GRACE = timedelta(seconds=60)
"""How late a slot may still fire when missed slots are skipped: a scheduler that ticks a little
after the slot (or was briefly paused) still fires it."""

_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
# Random (R) and hashed (H) fields would draw a different minute in every scheduler process.
_NONDETERMINISTIC = re.compile(r"(^|[,/\-])\s*[RrHh](\(|$|[,/\-])")
_ZONE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")
# Keys that name the zone of whichever machine runs the scheduler, not one place.
_MACHINE_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_SCAN_LIMIT = 100_000
_ONE_US = timedelta(microseconds=1)


def check_cron(expr: str) -> FieldProblem | None:
    """Why ``expr`` is not an accepted cron expression (``None`` when it is).

    Five fields (minute hour day-of-month month day-of-week) or an alias such as ``@daily``;
    slots are whole minutes.
    """
    text = expr.strip()
    if not text:
        return FieldProblem("cron", "required: five fields, e.g. '*/5 * * * *'")
    if text.startswith("@"):
        if text not in _ALIASES:
            known = ", ".join(sorted(_ALIASES))
            return FieldProblem("cron", f"unknown alias {text!r}; one of {known}")
        return None
    fields = text.split()
    if len(fields) != 5:
        return FieldProblem(
            "cron",
            f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    if any(_NONDETERMINISTIC.search(field) for field in fields):
        return FieldProblem("cron", "random (R) and hashed (H) fields are not supported")
    from croniter import CroniterError, croniter  # type: ignore[import-untyped]

    try:
        croniter(text, datetime(2000, 1, 1))
    except CroniterError as exc:
        return FieldProblem("cron", f"not a valid cron expression: {exc}")
    return None


def load_zone(key: str) -> ZoneInfo:
    """The IANA time zone ``key`` (``UTC``, ``Asia/Shanghai``); raises ValueError if unknown."""
    if not _ZONE_KEY.match(key) or key in _MACHINE_ZONES:
        raise ValueError(f"unknown time zone {key!r}; use an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown time zone {key!r}; use an IANA name such as Europe/Berlin"
        ) from None


class CronSlots:
    """The slots of one cron expression in one time zone, as aware UTC datetimes.

    Build with :func:`cron_slots`, which validates; a schedule's expression and zone are checked
    when it is added, so reading its slots later cannot fail on them.
    """

    def __init__(self, expr: str, zone: ZoneInfo) -> None:
        self.expr = expr.strip()
        self.zone = zone

    def _walls(self, start: datetime, *, backwards: bool = False) -> Iterator[datetime]:
        """Wall-clock slot times strictly after (or before) the naive wall time ``start``."""
        from croniter import croniter

        it = croniter(self.expr, start)
        step = it.get_prev if backwards else it.get_next
        for _ in range(_SCAN_LIMIT):
            value = step(datetime)
            assert isinstance(value, datetime)
            yield value
        raise RuntimeError(f"cron {self.expr!r}: no slot found in {_SCAN_LIMIT} steps")

    def _wall(self, when: datetime) -> datetime:
        return when.astimezone(self.zone).replace(tzinfo=None)

    def instant(self, wall: datetime) -> datetime:
        """The UTC instant of a naive wall-clock time in this zone (see the module notes)."""
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        if first.astimezone(self.zone).replace(tzinfo=None) == wall:
            return first  # it exists; fold=0 is the first of two occurrences
        return self._gap_end(wall, first)

    def _gap_end(self, wall: datetime, after: datetime) -> datetime:
        """The instant clocks jumped forward over ``wall`` (the first instant after the gap)."""
        # fold=1 reads a time in a gap with the offset after the jump: an instant before it.
        lo = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        hi = after
        target = hi.astimezone(self.zone).utcoffset()
        while hi - lo > timedelta(seconds=1):
            mid = lo + (hi - lo) // 2
            if mid.astimezone(self.zone).utcoffset() == target:
                hi = mid
            else:
                lo = mid
        return hi.replace(microsecond=0)

    def next_after(self, when: datetime) -> datetime:
        """The first slot strictly after ``when``."""
        # A wall time just after ``when``'s can still map before it, in the second pass of a
        # repeated hour (its slots belong to the first pass): step over those.
        for wall in self._walls(self._wall(when)):
            at = self.instant(wall)
            if at > when:
                return at
        raise AssertionError("unreachable")  # pragma: no cover

    def last_at_or_before(self, when: datetime) -> datetime:
        """The latest slot at or before ``when``."""
        found: datetime | None = None
        wall = self._wall(when)
        for later in self._walls(wall):
            at = self.instant(later)
            if at > when:
                break
            found = at  # the repeated hour: a later wall time, an earlier instant
        if found is not None:
            return found
        # Slot instants follow wall-clock order, so the latest wall time at or before ``when``'s
        # is the latest slot; starting a microsecond later makes ``when``'s own minute count.
        return self.instant(next(self._walls(wall + _ONE_US, backwards=True)))


def cron_slots(expr: str, tz: str) -> CronSlots:
    """Validated slots of ``expr`` in zone ``tz``; raises ValueError naming what is wrong.

    The message starts with the field (``cron: ...`` or ``tz: ...``); use :func:`problems` to
    get FieldProblems instead.
    """
    found = problems(expr, tz)
    if found:
        raise ValueError("; ".join(str(p) for p in found))
    return CronSlots(expr, load_zone(tz))


def problems(expr: str, tz: str, now: datetime | None = None) -> list[FieldProblem]:
    """Everything wrong with ``expr`` and ``tz`` (empty when both are fine).

    With ``now``, an expression that matches no date at all (``0 0 31 2 *``) is refused too.
    """
    found: list[FieldProblem] = []
    cron_problem = check_cron(expr)
    if cron_problem is not None:
        found.append(cron_problem)
    zone: ZoneInfo | None = None
    try:
        zone = load_zone(tz)
    except ValueError as exc:
        found.append(FieldProblem("tz", str(exc)))
    if not found and zone is not None and now is not None:
        from croniter import CroniterBadDateError

        try:
            CronSlots(expr, zone).next_after(now)
        except CroniterBadDateError:
            found.append(FieldProblem("cron", "never matches a date"))
    return found


@dataclass(frozen=True)
class Firing:
    """What to do with a schedule's due slots: fire ``slots`` (oldest first), skip the other
    due ones, and wait next for ``next_at``, the first slot after now."""

    slots: tuple[datetime, ...]
    next_at: datetime


def plan(
    slots: CronSlots,
    next_at: datetime,
    now: datetime,
    catch_up: CatchUp,
    grace: timedelta = MISFIRE_GRACE,
) -> Firing | None:
    """Which slots fire when a scheduler runs at ``now``; ``None`` if nothing is due yet.

    ``next_at`` is the first slot not handled yet, so the due slots are those from ``next_at``
    to ``now``. Every due slot no more than ``grace`` old fires (it is on time). The others were
    missed: with ``CatchUp.SKIP`` none of them fires; with ``CatchUp.ONCE`` the latest due slot
    fires when no slot is on time, so a scheduler that was down runs a missed slot once.
    """
    if next_at > now:
        return None
    start = max(next_at, now - grace)
    slot = next_at if start == next_at else slots.next_after(start - _ONE_US)
    fire: list[datetime] = []
    while slot <= now:
        fire.append(slot)
        slot = slots.next_after(slot)
    if not fire and catch_up is CatchUp.ONCE:
        latest = slots.last_at_or_before(now)
        if latest >= next_at:
            fire.append(latest)
    return Firing(tuple(fire), slot)


def slot_key(name: str, slot: datetime) -> str:
    """The idempotency key of the task a schedule submits for a slot: one task per slot."""
    return f"cron:{name}:{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
