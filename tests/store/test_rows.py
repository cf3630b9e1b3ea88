"""The one codec: a record read back from a row gets each field decoded by its declared type."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from uuid import uuid4

from agentqueue.domain.schedule import CatchUp, Schedule
from agentqueue.store.base import Bucket, Candidate, LeaderInfo, PausedType
from agentqueue.store.postgres.dialect import CODEC as POSTGRES
from agentqueue.store.rows import record_from_row
from agentqueue.store.sqlite.dialect import CODEC as SQLITE
from agentqueue.store.sqlite.dialect import to_micros

AT = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)


def test_sqlite_rows_decode_to_records_with_native_values() -> None:
    task_id = uuid4()
    row = {
        "id": str(task_id), "tenant": "t", "task_type": "docs", "assignee": None, "priority": 3,
        "eligible_at": to_micros(AT), "seq": 7, "kind": "task", "labels": '["a","b"]',
    }  # fmt: skip
    assert record_from_row(Candidate, row, SQLITE) == Candidate(
        task_id, "t", "docs", None, 3, AT, 7, "task", ("a", "b")
    )
    assert record_from_row(Bucket, {"name": "n", "tokens": 1.5, "updated_at": to_micros(AT)},
                           SQLITE) == Bucket(1.5, AT)  # fmt: skip
    schedule = {
        "tenant": "t", "name": "nightly", "cron": "0 3 * * *", "tz": "UTC",
        "task": '{"title":"x"}', "catch_up": "once", "next_at": to_micros(AT),
        "created_by": "me", "created_at": to_micros(AT), "updated_at": to_micros(AT),
        "last_slot_at": None, "last_fired_at": to_micros(AT),
    }  # fmt: skip
    decoded = record_from_row(Schedule, schedule, SQLITE)
    assert decoded.task == {"title": "x"} and decoded.catch_up is CatchUp.ONCE
    assert (decoded.next_at, decoded.last_slot_at, decoded.last_fired_at) == (AT, None, AT)


def test_postgres_rows_pass_native_values_through() -> None:
    row = {"name": "leader", "holder": "h", "term": 2, "acquired_at": AT, "renewed_at": AT,
           "expires_at": AT}  # fmt: skip
    assert record_from_row(LeaderInfo, row, POSTGRES) == LeaderInfo("leader", "h", 2, AT, AT, AT)
    paused = {"task_type": "docs", "paused_at": AT, "paused_by": "me", "reason": "incident"}
    assert record_from_row(PausedType, paused, POSTGRES) == PausedType("docs", AT, "me", "incident")


def test_every_record_field_type_has_a_decoder_or_passes_as_is() -> None:
    plain = {"str", "str | None", "int", "float"}
    decoded = {
        "datetime",
        "datetime | None",
        "UUID",
        "tuple[str, ...]",
        "dict[str, Any]",
        "CatchUp",
    }
    for cls in (Candidate, Bucket, LeaderInfo, PausedType, Schedule):
        for field in fields(cls):
            assert str(field.type) in plain | decoded, (cls.__name__, field.name, field.type)
