"""R24, the global sequence: PostgreSQL numbers events as they are written, so a transaction
that rolls back leaves numbers no event has. The anchoring step signs those gaps, waits for
transactions that may still hold numbers, and verify holds every number up to the last anchor
to be an event or a signed gap."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from audit_activity import activity

from agentqueue import AsyncQueue, ManualClock, Settings
from agentqueue.domain.audit import (
    ANCHOR_KIND,
    GENESIS,
    Keyring,
    canonical_json,
    canonical_time,
    chained_event,
    install_keys,
    make_anchor,
    roll,
)
from agentqueue.domain.errors import StoreUnavailable
from agentqueue.domain.models import Task
from agentqueue.service.audit import VerifyReport
from agentqueue.store import make_store
from agentqueue.store.migrate import available
from agentqueue.store.postgres import dialect as postgres_dialect
from anchor_fold import at_once

Raw = Any
KEY_ENV = "AQ_TEST_AUDIT_KEY"
KEY = "a-key-kept-outside-the-database-0001"
WAIT_SECS = 30.0


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


@pytest.fixture(autouse=True)
def _keys_and_triggers_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    install_keys(Keyring())
    for name in ("db_url", "pg_url"):
        url = request.node.funcargs.get(name)
        if isinstance(url, str) and not is_sqlite(url):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ALTER TABLE aq_events ENABLE TRIGGER ALL")
                conn.execute("ALTER TABLE aq_audit_anchors ENABLE TRIGGER ALL")


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    monkeypatch.setenv(KEY_ENV, KEY)
    return Settings(
        queue={"admit_on_submit": False},
        audit={"key_env": KEY_ENV, "anchor_file": str(tmp_path / "anchors.jsonl")},
    )


def problems_about(report: VerifyReport, words: str) -> list[str]:
    return [p for p in report.problems if words in p]


class OpenWriter:
    """A second connection of its own, in a transaction that writes one event of ``task`` (the
    next of its chain, with the head moved to it) and stays open until told how to end."""

    def __init__(self, url: str, task: Task, at: Any) -> None:
        self.conn = psycopg.connect(url)
        event = chained_event(
            task,
            task.event_seq + 1,
            task.last_hash,
            at,
            task.state,
            task.state,
            "note",
            "someone",
            "written in a transaction left open",
            {},
        )
        self.conn.execute(
            "INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action,"
            " actor, reason, data, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                task.id,
                event.seq,
                event.tenant,
                event.at,
                task.state.value,
                task.state.value,
                event.action,
                event.actor,
                event.reason,
                event.data_text,
                event.hash,
            ),
        )
        self.conn.execute(
            "UPDATE aq_tasks SET event_seq = %s, last_hash = %s WHERE id = %s",
            (event.seq, event.hash, task.id),
        )
        row = self.conn.execute(
            "SELECT gseq FROM aq_events WHERE task_id = %s AND seq = %s", (task.id, event.seq)
        ).fetchone()
        assert row is not None
        self.number = int(row[0])

    def end(self, commit: bool) -> None:
        if commit:
            self.conn.commit()
        else:
            self.conn.rollback()
        self.conn.close()


@pytest.fixture
async def plain_pg_queue(pg_url: str, clock: ManualClock) -> Any:
    """A queue without a key (the open writer's event is hashed as the chain's plain hash)."""
    install_keys(Keyring())
    q = AsyncQueue(pg_url, clock=clock, settings=Settings(queue={"admit_on_submit": False}))
    await q.open()
    yield q
    await q.close()


async def gaps_signed(queue: AsyncQueue) -> list[tuple[int, int]]:
    async with queue.store.audit_snapshot() as snap:
        return [g for a in [a async for a in snap.anchors] for g in a.gaps]


def stored_hashes(url: str) -> list[str]:
    """Every numbered event's hash, in number order, read directly."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT hash FROM aq_events WHERE gseq IS NOT NULL ORDER BY gseq")
        return [r[0] for r in rows]


def rolled_as_stored(url: str) -> str:
    """The running hash over every numbered event's hash, in number order, read directly."""
    return functools.reduce(roll, stored_hashes(url), GENESIS)


@pytest.mark.postgres
async def test_an_anchor_over_every_number_folds_the_hashes_in_number_order(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock
) -> None:
    """With no gap among the numbers (where PostgreSQL's step reads the range's hashes joined
    in one row), each anchor's digest is every event's hash rolled in number order, as read
    directly, and covers every number without a gap. (Joined in another order, this fails.)"""
    queue = plain_pg_queue
    await activity(queue, clock)
    [anchor] = await queue.anchor_audit()
    hashes = stored_hashes(pg_url)
    assert (anchor.after, anchor.count, anchor.gaps) == (0, len(hashes), ())
    assert anchor.digest == rolled_as_stored(pg_url)
    await queue.submit(title="after", task_type="bugfix")
    [second] = await queue.anchor_audit()
    assert (second.after, second.count) == (len(hashes), len(hashes) + 1)
    assert second.digest == roll(anchor.digest, stored_hashes(pg_url)[-1])
    report = await queue.verify()
    assert report.ok, report


@pytest.mark.postgres
async def test_a_hash_holding_a_comma_is_anchored_as_stored(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock
) -> None:
    """A hash with a comma in it (someone with the database wrote it) would split the joined
    row wrongly: the count disagrees, the step reads the events a row each, and the anchor
    signs what is stored. Verify names the changed event, as for any other change."""
    queue = plain_pg_queue
    await activity(queue, clock)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE aq_events DISABLE TRIGGER aq_events_no_update")
        conn.execute("UPDATE aq_events SET hash = 'not,a,hash' WHERE gseq = 5")
    [anchor] = await queue.anchor_audit()
    hashes = stored_hashes(pg_url)
    assert "not,a,hash" in hashes
    assert (anchor.count, anchor.gaps) == (len(hashes), ())
    assert anchor.digest == rolled_as_stored(pg_url)
    report = await queue.verify()
    assert not report.ok


@pytest.mark.postgres
async def test_the_numbers_of_a_rolled_back_transaction_are_signed_gaps(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock
) -> None:
    queue = plain_pg_queue
    tasks = await activity(queue, clock)
    writer = OpenWriter(pg_url, await queue.get(tasks[0].id), clock.now())
    assert writer.number == 13
    writer.end(commit=False)
    await queue.submit(title="after", task_type="bugfix")
    [anchor] = await queue.anchor_audit()
    assert (anchor.after, anchor.count, anchor.gaps) == (0, 14, ((13, 13),))
    assert json.loads(anchor.line())["gaps"] == 1
    report = await queue.verify()
    assert report.ok, report
    assert report.events == 13


@pytest.mark.postgres
@pytest.mark.parametrize("commit", [True, False], ids=["commits", "rolls-back"])
async def test_anchoring_waits_for_a_transaction_that_drew_a_number(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock, commit: bool
) -> None:
    """A transaction holds number 13, uncommitted; event 14 is committed. The anchoring step
    must not cover 13 (as a gap, or past it) while that transaction may still commit it: it
    waits for it to end, then signs 13 as an event or a gap as it ended."""
    queue = plain_pg_queue
    tasks = await activity(queue, clock)
    await queue.anchor_audit()
    writer = OpenWriter(pg_url, await queue.get(tasks[0].id), clock.now())
    try:
        await queue.submit(title="after", task_type="bugfix")
        job = asyncio.create_task(queue.anchor_audit())
        # The anchoring step has found the open transaction and waits for it to end.
        with psycopg.connect(pg_url, autocommit=True) as watch:
            for _ in range(int(WAIT_SECS / 0.05)):
                row = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND query LIKE '%%virtualtransaction = ANY%%' AND pid <> pg_backend_pid()"
                ).fetchone()
                if row and row[0]:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the anchoring step never waited for the open transaction")
        # Writers do not wait for it: it holds no lock they would queue behind.
        await asyncio.wait_for(queue.submit(title="meanwhile", task_type="bugfix"), WAIT_SECS)
        assert not job.done()
    finally:
        writer.end(commit)
    [anchor] = await asyncio.wait_for(job, WAIT_SECS)
    assert (anchor.after, anchor.count) == (12, 14)
    assert anchor.gaps == (() if commit else ((13, 13),))
    report = await queue.verify()
    assert report.ok, report
    assert report.events == (15 if commit else 14)


@pytest.mark.postgres
async def test_anchoring_gives_up_on_a_transaction_left_open_and_anchors_once_it_ends(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_dialect, "SETTLE_WAIT_SECS", 0.2)
    queue = plain_pg_queue
    tasks = await activity(queue, clock)
    writer = OpenWriter(pg_url, await queue.get(tasks[0].id), clock.now())
    try:
        with pytest.raises(StoreUnavailable, match="transaction\\(s\\) that write events"):
            await queue.anchor_audit()
    finally:
        writer.end(commit=False)
    [anchor] = await queue.anchor_audit()
    assert (anchor.count, anchor.gaps) == (13, ((13, 13),))
    assert (await queue.verify()).ok


async def test_an_anchored_event_deleted_is_reported_at_its_number(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    tasks = await activity(queue, clock)
    await queue.anchor_audit()
    victim = tasks[1].id
    async with queue.store.audit_snapshot() as snap:
        [number] = [e.gseq async for e in snap.events if e.task_id == victim and e.seq == 2]
    deleted = "DELETE FROM aq_events WHERE task_id = ? AND seq = 2"
    assert raw.execute(deleted, (victim,), bypass=True) == 1
    report = await queue.verify()
    assert problems_about(report, f"global sequence: event #{number} is missing"), report


async def test_an_edited_gap_list_fails_the_anchors_signature(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    """Gaps are in the signed data: listing one more (to hide a deleted event) or one fewer
    breaks the anchor's signature."""
    await activity(queue, clock)
    [anchor] = await queue.anchor_audit()
    data = json.loads(anchor.data)
    assert data["gaps"] == []
    data["gaps"] = [[5, 5]]
    if is_sqlite(raw.url):
        raw.execute("DROP TRIGGER aq_audit_anchors_no_update")
    raw.execute(
        "UPDATE aq_audit_anchors SET data = ? WHERE id = ?",
        (canonical_json(data), anchor.id),
        bypass=True,
    )
    report = await queue.verify()
    assert problems_about(report, f"audit record {anchor.id} (anchor): hash does not match")


async def test_an_anchor_deleted_between_two_others_is_reported(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    await activity(queue, clock)
    await queue.anchor_audit()
    await queue.submit(title="second", task_type="bugfix")
    [second] = await queue.anchor_audit()
    await queue.submit(title="third", task_type="bugfix")
    [third] = await queue.anchor_audit()
    assert (await queue.verify()).ok
    if is_sqlite(raw.url):
        raw.execute("DROP TRIGGER aq_audit_anchors_no_delete")
    raw.execute("DELETE FROM aq_audit_anchors WHERE id = ?", (second.id,), bypass=True)
    report = await queue.verify()
    assert problems_about(report, f"anchor {third.id} follows #{second.count}"), report


@pytest.mark.postgres
async def test_an_event_added_at_a_signed_gap_is_reported(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock
) -> None:
    queue = plain_pg_queue
    tasks = await activity(queue, clock)
    task = await queue.get(tasks[0].id)
    OpenWriter(pg_url, task, clock.now()).end(commit=False)
    await queue.submit(title="after", task_type="bugfix")
    [anchor] = await queue.anchor_audit()
    assert anchor.gaps == ((13, 13),)
    # The same event written afterwards with the number the rolled-back one had drawn.
    writer = OpenWriter(pg_url, task, clock.now())
    writer.conn.execute("SET session_replication_role = replica")
    writer.conn.execute(
        "UPDATE aq_events SET gseq = 13 WHERE task_id = %s AND seq = %s",
        (task.id, task.event_seq + 1),
    )
    writer.end(commit=True)
    report = await queue.verify()
    assert problems_about(report, f"event #13 is numbered where anchor {anchor.id} signed a gap")


async def test_migrating_numbers_waiting_events_in_the_order_anchoring_did(
    db_url: str, raw: Raw, clock: ManualClock, settings: Settings, tmp_path: Path
) -> None:
    """A database of before events were numbered as written (version 16): four events
    numbered and anchored the old way, the rest waiting. The migration numbers the waiting
    ones after them, by (at, task_id, seq); later events follow; every anchor, old and new,
    verifies, the anchor file's old line (without a gap count) included."""
    if not is_sqlite(db_url):
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
    install_keys(settings.audit.keyring())  # before the store: its connections carry the key
    store = make_store(db_url)
    await store.open(migrate=False)
    # Every migration before the numbering one (0018; 0017, mail threads, came before it).
    before = [m for m in available(store.dialect) if m.version < 18]
    for migration in before:
        await store._d.apply_migration(migration)  # type: ignore[attr-defined]
    queue = AsyncQueue(db_url, clock=clock, settings=settings, store=store)
    queue._opened = True  # opened above, without migrating past 17
    try:
        await activity(queue, clock)
        if is_sqlite(db_url):
            # This release's SQLite inserts number their events even on the old schema: take
            # the numbers back off, under version 15's guard as it was.
            guard = available("sqlite")[14].sql
            start = guard.index("CREATE TRIGGER aq_events_no_update")
            guard = guard[start : guard.index("END;", start) + 4]
            with sqlite3.connect(db_url.removeprefix("sqlite:///").partition("?")[0]) as conn:
                conn.execute("DROP TRIGGER aq_events_no_update")
                conn.execute("UPDATE aq_events SET gseq = NULL")
                conn.execute(guard)
        async with queue.store.audit_snapshot() as snap:
            events = [e async for e in snap.events]
        assert [e.gseq for e in events] == [None] * 12
        waiting = sorted(events, key=lambda e: (e.at, e.task_id, e.seq))
        digest = GENESIS
        for number, event in enumerate(waiting[:4], 1):
            raw.execute(
                "UPDATE aq_events SET gseq = ? WHERE task_id = ? AND seq = ?",
                (number, event.task_id, event.seq),
            )
            digest = roll(digest, event.hash)
        old = make_anchor(ANCHOR_KIND, clock.now(), 4, digest, '{"plain_upto":4}')
        at: Any = canonical_time(old.at) if is_sqlite(db_url) else old.at
        raw.execute(
            "INSERT INTO aq_audit_anchors (kind, at, count, digest, data, mac)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (old.kind, at, old.count, old.digest, old.data, old.mac),
        )
        anchor_id = raw.scalar("SELECT max(id) FROM aq_audit_anchors")
        line = json.loads(old.line())
        del line["gaps"]
        line["id"] = anchor_id
        (tmp_path / "anchors.jsonl").write_text(canonical_json(line) + "\n")
        assert 18 in await queue.migrate()
        async with queue.store.audit_snapshot() as snap:
            numbered = sorted([(e.gseq or 0, e.task_id, e.seq) async for e in snap.events])
        assert [(t, s) for _, t, s in numbered] == [(e.task_id, e.seq) for e in waiting]
        assert [n for n, _, _ in numbered] == list(range(1, 13))
        assert (await queue.verify()).ok
        later = (await queue.submit(title="later", task_type="bugfix")).task
        async with queue.store.audit_snapshot() as snap:
            [latest] = [e.gseq async for e in snap.events if e.task_id == later.id]
        assert latest == 13
        [anchor] = await queue.anchor_audit()
        assert (anchor.after, anchor.count, anchor.gaps) == (4, 13, ())
        report = await queue.verify()
        assert report.ok and report.events == 13, report
    finally:
        await queue.close()


async def numbered_events(queue: AsyncQueue) -> list[tuple[int, str]]:
    async with queue.store.audit_snapshot() as snap:
        return [n async for n in snap.numbered]


async def test_an_anchor_read_in_pages_is_the_anchor_read_at_once(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """A step reads and folds its numbers a page at a time: with pages of 5 and then of 1, each
    anchor is the one folded over all its events at once (digest, gaps and signature), and the
    trail verifies."""
    await activity(queue, clock)
    events = await numbered_events(queue)
    with pytest.raises(ValueError, match="page must be at least 1"):
        await queue.store.anchor_audit(clock.now(), 100, page=0)
    anchor = await queue.store.anchor_audit(clock.now(), 100, page=5)
    assert anchor is not None and (anchor.after, anchor.count) == (0, 12)
    expected = at_once(
        None, [h for _, h in events], clock.now(), 12, numbers=[n for n, _ in events]
    )
    assert replace(anchor, id=None) == expected
    for i in range(3):
        await queue.submit(title=f"after {i}", task_type="bugfix")
    newer = (await numbered_events(queue))[len(events) :]
    second = await queue.store.anchor_audit(clock.now(), 100, page=1)
    assert second is not None and (second.after, second.count) == (12, 15)
    assert replace(second, id=None) == at_once(
        anchor, [h for _, h in newer], clock.now(), 15, numbers=[n for n, _ in newer]
    )
    report = await queue.verify()
    assert report.ok, report


@pytest.mark.postgres
async def test_a_run_of_gaps_across_pages_is_signed_as_one_range(
    plain_pg_queue: AsyncQueue, pg_url: str, clock: ManualClock
) -> None:
    """Numbers 13..16 drawn and never used, anchored in pages of 3 (..12, ..15, ..17): the run
    is one signed gap, the page ends inside it notwithstanding, and the trail verifies."""
    queue = plain_pg_queue
    await activity(queue, clock)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT nextval('aq_event_gseq') FROM generate_series(1, 4)")
    await queue.submit(title="after", task_type="bugfix")
    anchor = await queue.store.anchor_audit(clock.now(), 100, page=3)
    assert anchor is not None
    assert (anchor.after, anchor.count, anchor.gaps) == (0, 17, ((13, 16),))
    assert anchor.digest == rolled_as_stored(pg_url)
    report = await queue.verify()
    assert report.ok, report
    assert report.events == 13


async def test_two_processes_anchoring_at_once_record_one_anchor(
    db_url: str, clock: ManualClock, queue: AsyncQueue, settings: Settings
) -> None:
    """Two queues (as two processes) fold the same numbers at once, a page at a time: the one
    that records first wins, the other records nothing (its anchor would follow one that is no
    longer the last), and the trail verifies."""
    await activity(queue, clock)
    other = AsyncQueue(db_url, clock=clock, settings=settings)
    await other.open()
    try:
        made = await asyncio.gather(
            queue.store.anchor_audit(clock.now(), 100, page=1),
            other.store.anchor_audit(clock.now(), 100, page=1),
        )
    finally:
        await other.close()
    assert sorted(a is None for a in made) == [False, True]
    async with queue.store.audit_snapshot() as snap:
        anchors = [a async for a in snap.anchors]
    assert [(a.after, a.count) for a in anchors] == [(0, 12)]
    report = await queue.verify()
    assert report.ok, report


async def test_writes_go_on_while_a_step_folds(
    queue: AsyncQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events are folded outside any transaction: a submit made in the middle of the fold
    commits at once (on SQLite, a fold under the write lock would have it wait for the step,
    which waits for it: it would time out), and the step anchors what it set out to."""
    await activity(queue, clock)
    store = queue.store
    fold_page = store._fold_page
    submitted: list[Any] = []

    async def page_with_a_write(*args: Any) -> None:
        if not submitted:
            submitted.append(
                await asyncio.wait_for(queue.submit(title="meanwhile", task_type="bugfix"), 10)
            )
        await fold_page(*args)

    monkeypatch.setattr(store, "_fold_page", page_with_a_write)
    anchor = await store.anchor_audit(clock.now(), 100, page=5)
    assert submitted and anchor is not None
    assert (anchor.after, anchor.count) == (0, 12)
    monkeypatch.undo()
    [after] = await queue.anchor_audit()
    assert (after.after, after.count) == (12, 13)
    report = await queue.verify()
    assert report.ok, report
