"""A cron schedule (R18) as it is stored: which tasks to submit, when, in which time zone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class CatchUp(StrEnum):
    """What happens to slots missed while no scheduler ran (see ``intake.cron.plan``)."""

    SKIP = "skip"
    """Missed slots are dropped; only a slot still within the misfire grace fires."""
    ONCE = "once"
    """The most recent missed slot fires once; earlier missed ones are dropped."""


@dataclass(frozen=True)
class Schedule:
    """One schedule of one tenant, named uniquely within it.

    ``task`` is the template of every task it submits (task fields of SPEC section 1, without the
    ones the schedule sets itself). ``next_at`` is the first slot not yet handled (fired or
    skipped); ``last_slot_at`` the latest slot that fired and ``last_fired_at`` when it did.
    """

    tenant: str
    name: str
    cron: str
    tz: str
    task: dict[str, Any]
    catch_up: CatchUp
    next_at: datetime
    created_by: str
    created_at: datetime
    updated_at: datetime
    last_slot_at: datetime | None = None
    last_fired_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field, times as ISO 8601 strings."""

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "tenant": self.tenant,
            "name": self.name,
            "cron": self.cron,
            "tz": self.tz,
            "catch_up": self.catch_up.value,
            "task": self.task,
            "next_at": iso(self.next_at),
            "last_slot_at": iso(self.last_slot_at),
            "last_fired_at": iso(self.last_fired_at),
            "created_by": self.created_by,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
