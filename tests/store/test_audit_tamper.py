"""R3 on each backend: the database refuses to change or delete audit events, and when someone
gets around that, verify names the first event that no longer holds."""

from __future__ import annotations

import sqlite3
from typing import Any
from uuid import UUID

import psycopg
import pytest
from audit_activity import activity

from agentqueue import AsyncQueue, ManualClock, TaskState

# The RawDatabase fixture type lives in this folder's conftest.
Raw = Any


async def target(queue: AsyncQueue, clock: ManualClock) -> UUID:
    """The task in the middle (by id) of three, so breaks on either side would show up."""
    return (await activity(queue, clock))[1].id


TAMPERED_VALUES = {
    "actor": "'someone-else'",
    "reason": "'nothing to see'",
    "data": '\'{"worker":"worker-2","attempt":1}\'',
    "to_state": "'archived'",  # no event of the activity goes to archived
    "hash": "'" + "0" * 64 + "'",
}


@pytest.mark.parametrize("column", sorted(TAMPERED_VALUES))
@pytest.mark.parametrize("seq", [2, 3, 4])
async def test_changing_an_event_column_is_reported_at_that_event(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, column: str, seq: int
) -> None:
    task_id = await target(queue, clock)
    changed = raw.execute(
        f"UPDATE aq_events SET {column} = {TAMPERED_VALUES[column]} WHERE task_id = ? AND seq = ?",
        (task_id, seq),
        bypass=True,
    )
    assert changed == 1
    report = await queue.verify()
    assert not report.ok
    first = report.breaks[0]
    assert (first.task_id, first.seq) == (task_id, seq), str(first)
    assert len(report.breaks) == 1


async def test_a_one_character_change_of_event_data_is_reported(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    task_id = await target(queue, clock)
    data = raw.scalar(
        "SELECT CAST(data AS TEXT) FROM aq_events WHERE task_id = ? AND seq = 1", (task_id,)
    )
    assert '"priority":5' in data
    raw.execute(
        "UPDATE aq_events SET data = ? WHERE task_id = ? AND seq = 1",
        (data.replace('"priority":5', '"priority":0'), task_id),
        bypass=True,
    )
    first = (await queue.verify()).breaks[0]
    assert (first.task_id, first.seq) == (task_id, 1)


@pytest.mark.parametrize(("deleted", "reported"), [(2, 2), (3, 3), (4, 4), (1, 1)])
async def test_deleting_an_event_is_reported_at_the_missing_seq(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, deleted: int, reported: int
) -> None:
    task_id = await target(queue, clock)
    removed = raw.execute(
        "DELETE FROM aq_events WHERE task_id = ? AND seq = ?", (task_id, deleted), bypass=True
    )
    assert removed == 1
    report = await queue.verify()
    assert not report.ok
    first = report.breaks[0]
    assert (first.task_id, first.seq) == (task_id, reported), str(first)
    assert "missing" in first.problem


async def test_deleting_the_last_event_is_reported_even_though_the_rest_chain_fine(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    task_id = await target(queue, clock)
    raw.execute("DELETE FROM aq_events WHERE task_id = ? AND seq = 4", (task_id,), bypass=True)
    first = (await queue.verify()).breaks[0]
    assert (first.task_id, first.seq) == (task_id, 4)
    assert "4 events" in first.problem


async def test_deleting_every_event_of_a_task_is_reported(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    task_id = await target(queue, clock)
    raw.execute("DELETE FROM aq_events WHERE task_id = ?", (task_id,), bypass=True)
    first = (await queue.verify()).breaks[0]
    assert (first.task_id, first.seq) == (task_id, 1)


async def test_first_break_is_the_lowest_task_id_when_several_are_tampered(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    tasks = await activity(queue, clock)
    for task in reversed(tasks[1:]):
        raw.execute(
            "UPDATE aq_events SET reason = 'x' WHERE task_id = ? AND seq = 3",
            (task.id,),
            bypass=True,
        )
    report = await queue.verify()
    assert [(b.task_id, b.seq) for b in report.breaks] == [(tasks[1].id, 3), (tasks[2].id, 3)]


async def test_rewriting_the_task_head_does_not_hide_a_changed_event(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    task_id = await target(queue, clock)
    raw.execute(
        "UPDATE aq_events SET actor = 'x' WHERE task_id = ? AND seq = 2", (task_id,), bypass=True
    )
    # Point the head at a hash taken over the changed event: the link after it still breaks.
    raw.execute("UPDATE aq_tasks SET last_hash = ? WHERE id = ?", ("f" * 64, task_id))
    first = (await queue.verify()).breaks[0]
    assert (first.task_id, first.seq) == (task_id, 2)


async def test_changing_the_head_recorded_on_the_task_is_reported(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    task_id = await target(queue, clock)
    raw.execute("UPDATE aq_tasks SET last_hash = ? WHERE id = ?", ("f" * 64, task_id))
    first = (await queue.verify()).breaks[0]
    assert (first.task_id, first.seq) == (task_id, 4)


async def test_verify_passes_after_ordinary_activity(queue: AsyncQueue, clock: ManualClock) -> None:
    tasks = await activity(queue, clock)
    for task in tasks:
        if (await queue.get(task.id)).state is TaskState.RETRYING:
            await queue.cancel(task.id, actor="operator-7", reason="enough")
    report = await queue.verify()
    assert report.ok and report.events == 13


# --- the database itself refuses ------------------------------------------------------------


def _refused(db_url: str) -> type[Exception] | tuple[type[Exception], ...]:
    if db_url.startswith("sqlite:"):
        return sqlite3.IntegrityError
    return psycopg.errors.RaiseException


async def test_database_refuses_update_of_an_event(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, db_url: str
) -> None:
    task_id = await target(queue, clock)
    with pytest.raises(_refused(db_url), match="append-only"):
        raw.execute(
            "UPDATE aq_events SET actor = 'someone-else' WHERE task_id = ? AND seq = 2", (task_id,)
        )
    actor = raw.scalar("SELECT actor FROM aq_events WHERE task_id = ? AND seq = 2", (task_id,))
    assert actor == "scheduler"
    assert (await queue.verify()).ok


async def test_database_refuses_delete_of_an_event(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, db_url: str
) -> None:
    task_id = await target(queue, clock)
    with pytest.raises(_refused(db_url), match="append-only"):
        raw.execute("DELETE FROM aq_events WHERE task_id = ?", (task_id,))
    count = raw.scalar("SELECT count(*) FROM aq_events WHERE task_id = ?", (task_id,))
    assert count == 4
    assert (await queue.verify()).ok


async def test_postgres_refuses_truncate_of_the_events(pg_url: str, clock: ManualClock) -> None:
    async with AsyncQueue(pg_url, clock=clock) as queue:
        await activity(queue, clock)
        with (
            psycopg.connect(pg_url, autocommit=True) as conn,
            pytest.raises(psycopg.errors.RaiseException, match="append-only"),
        ):
            conn.execute("TRUNCATE aq_events")
        assert (await queue.verify()).ok


async def test_truncating_the_chain_and_rewriting_the_head_to_match_is_still_caught(
    queue: AsyncQueue, raw: Raw
) -> None:
    # Delete the last event and point the task's head at the one before it: the chain is
    # internally whole and matches the head, but the task row's state is not where it ends.
    task = (await queue.submit(title="t", task_type="docs")).task
    await queue.cancel(task.id, actor="ops", reason="no longer needed")
    first = (await queue.events(task.id))[0]
    raw.execute("DELETE FROM aq_events WHERE task_id = ? AND seq = 2", (task.id,), bypass=True)
    raw.execute(
        "UPDATE aq_tasks SET event_seq = 1, last_hash = ? WHERE id = ?",
        (first.hash, task.id),
        bypass=True,
    )
    report = await queue.verify()
    assert not report.ok
    assert (report.breaks[0].task_id, report.breaks[0].seq) == (task.id, 1)
    assert "cancelled" in report.breaks[0].problem
