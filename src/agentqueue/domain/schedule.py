"""A cron schedule (R18) as it is stored: which tasks to submit, when, in which time zone."""

from __future__ import annotations

from collections.abc import Mapping
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schedule:
        """The schedule :meth:`to_json` gave."""

        def at(value: str | None) -> datetime | None:
            return None if value is None else datetime.fromisoformat(value)

        return cls(
            tenant=data["tenant"],
            name=data["name"],
            cron=data["cron"],
            tz=data["tz"],
            task=dict(data["task"]),
            catch_up=CatchUp(data["catch_up"]),
            next_at=datetime.fromisoformat(data["next_at"]),
            created_by=data["created_by"],
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            last_slot_at=at(data.get("last_slot_at")),
            last_fired_at=at(data.get("last_fired_at")),
        )
