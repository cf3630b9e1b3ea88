"""R24 on each backend: someone with the database itself (triggers off, or dropped) cannot
rewrite the audit log unseen. Each attack below is one the plain chain of R3 let through; here
``verify`` names it. The attacker has the database, not the audit key (kept in the environment
of the queue's processes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from audit_activity import activity

from agentqueue import AsyncQueue, ManualClock, Settings
from agentqueue.domain.audit import (
    PURGE_ACTION,
    Keyring,
    canonical_time,
    chain_material,
    chained_event,
    hash_tail,
    install_keys,
    installed_keys,
)
from agentqueue.service.audit import VerifyReport

Raw = Any


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


KEY_ENV = "AQ_TEST_AUDIT_KEY"
KEY = "a-key-kept-outside-the-database-0001"
OTHER_KEY_ENV = "AQ_TEST_AUDIT_KEY_NEXT"
OTHER_KEY = "a-key-kept-outside-the-database-0002"


@pytest.fixture(autouse=True)
def _keys_and_triggers_restored(db_url: str) -> Iterator[None]:
    """The keys of this process are put back, and PostgreSQL's triggers enabled again (the
    database outlives the test)."""
    yield
    install_keys(Keyring())
    if not is_sqlite(db_url):
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE aq_events ENABLE TRIGGER ALL")
            conn.execute("ALTER TABLE aq_audit_anchors ENABLE TRIGGER ALL")


def keyed_settings(tmp_path: Path, env: str = KEY_ENV, old: list[str] | None = None) -> Settings:
    return Settings(
        queue={"admit_on_submit": False},
        audit={
            "key_env": env,
            "old_keys": old or [],
            "anchor_file": str(tmp_path / "anchors.jsonl"),
        },
    )


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(OTHER_KEY_ENV, OTHER_KEY)
    return keyed_settings(tmp_path)


@pytest.fixture
def plain_settings() -> Settings:
    return Settings(queue={"admit_on_submit": False})


async def open_with(db_url: str, clock: ManualClock, settings: Settings) -> AsyncQueue:
    q = AsyncQueue(db_url, clock=clock, settings=settings)
    await q.open()
    return q


@pytest.fixture
async def plain_queue(
    db_url: str, clock: ManualClock, plain_settings: Settings
) -> AsyncIterator[AsyncQueue]:
    q = await open_with(db_url, clock, plain_settings)
    yield q
    await q.close()


def plain_hash(prev: str, task_id: UUID, tenant: str, seq: int, tail: str) -> str:
    """What the attacker can compute: the chain hash without the key."""
    return hashlib.sha256(
        chain_material(prev, str(task_id), tenant, seq, tail).encode()
    ).hexdigest()


async def forge_last_event(queue: AsyncQueue, raw: Raw, task_id: UUID) -> None:
    """Rewrite the actor of the task's last event, re-hash it (plain SHA-256, as the attacker
    can) and move the task's head to the new hash."""
    events = await queue.events(task_id)
    last, prev = events[-1], events[-2]
    tail = hash_tail(
        last.at,
        last.from_state.value if last.from_state else None,
        last.to_state.value,
        last.action,
        "mallory",
        last.reason,
        last.data_text,
    )
    forged = plain_hash(prev.hash, task_id, last.tenant, last.seq, tail)
    raw.execute(
        "UPDATE aq_events SET actor = 'mallory', hash = ? WHERE task_id = ? AND seq = ?",
        (forged, task_id, last.seq),
        bypass=True,
    )
    raw.execute("UPDATE aq_tasks SET last_hash = ? WHERE id = ?", (forged, task_id), bypass=True)
    # The row's signature would no longer match the new hash: drop it (unsigned rows pass
    # where no key is configured).
    raw.execute(
        "UPDATE aq_events SET row_mac = NULL WHERE task_id = ? AND seq = ?",
        (task_id, last.seq),
        bypass=True,
    )


def problems_about(report: VerifyReport, words: str) -> list[str]:
    return [p for p in report.problems if words in p]


@pytest.mark.parametrize("keyed", [True, False])
async def test_a_re_hashed_event_with_its_head_moved_is_caught_only_with_a_key(
    queue: AsyncQueue, plain_queue: AsyncQueue, clock: ManualClock, raw: Raw, keyed: bool
) -> None:
    """Without a key the forgery verifies (which is why the key matters); with one, the
    forged event is named: its hash is not keyed."""
    q = queue if keyed else plain_queue
    install_keys(q.settings.audit.keyring())
    tasks = await activity(q, clock)
    await forge_last_event(q, raw, tasks[1].id)
    report = await q.verify()
    if not keyed:
        assert report.breaks == []
        return
    [brk] = report.breaks
    assert (brk.task_id, brk.seq) == (tasks[1].id, 4)
    assert "not keyed" in brk.problem


async def test_events_are_keyed_with_the_key_id_of_the_configured_key(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    """Each hash names its key (the first 8 hex digits of its SHA-256) on both backends:
    events written in SQL (claim, complete) and in Python alike."""
    tasks = await activity(queue, clock)
    key_id = hashlib.sha256(KEY.encode()).hexdigest()[:8]
    for task in tasks:
        for event in await queue.events(task.id):
            assert event.hash.startswith(f"{key_id}:"), (event.action, event.hash)


async def test_a_whole_task_deleted_with_its_events_is_caught_by_the_global_sequence(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    tasks = await activity(queue, clock)
    assert await queue.anchor_audit()
    victim = tasks[1].id
    raw.execute("DELETE FROM aq_events WHERE task_id = ?", (victim,), bypass=True)
    raw.execute("DELETE FROM aq_tasks WHERE id = ?", (victim,), bypass=True)
    report = await queue.verify()
    assert report.breaks == []  # every chain left holds: only the sequence tells
    assert problems_about(report, "global sequence"), report.problems


async def test_a_cut_tail_with_the_head_recomputed_is_caught_by_the_global_sequence(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    """The completion of a task cut off, and its row put back exactly as the claim left it
    (which the claim event signed): every chain and row holds; the sequence does not."""
    tasks = await activity(queue, clock)
    assert await queue.anchor_audit()
    victim = next(t for t in tasks if t.title == "t0").id
    events = await queue.events(victim)
    kept = events[-2]
    assert kept.action == "claim"
    raw.execute("DELETE FROM aq_events WHERE task_id = ? AND seq = 4", (victim,), bypass=True)
    raw.execute(
        "UPDATE aq_tasks SET event_seq = 3, last_hash = ?, state = 'executing', result = NULL,"
        " assigned_to = 'worker-1' WHERE id = ?",
        (kept.hash, victim),
        bypass=True,
    )
    report = await queue.verify()
    assert report.breaks == []
    assert problems_about(report, "global sequence"), report.problems


async def forge_purge(queue: AsyncQueue, raw: Raw, task_id: UUID, clock: ManualClock) -> None:
    """Delete the task row and end its chain with a purge event hashed without the key."""
    task = await queue.get(task_id)
    ring = installed_keys()
    install_keys(Keyring())  # what the attacker can compute
    try:
        event = chained_event(
            task,
            task.event_seq + 1,
            task.last_hash,
            clock.now(),
            task.state,
            task.state,
            PURGE_ACTION,
            "scheduler",
            "dead letter kept 7 days; purged",
            {},
        )
    finally:
        install_keys(ring)
    at: Any = canonical_time(event.at) if is_sqlite(raw.url) else event.at
    raw.execute("DELETE FROM aq_tasks WHERE id = ?", (task_id,), bypass=True)
    raw.execute(
        "INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,"
        " reason, data, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            str(task_id),
            event.seq,
            event.tenant,
            at,
            task.state.value,
            task.state.value,
            PURGE_ACTION,
            event.actor,
            event.reason,
            event.data_text,
            event.hash,
        ),
        bypass=True,
    )


@pytest.mark.parametrize("keyed", [True, False])
async def test_a_forged_purge_is_caught(
    queue: AsyncQueue, plain_queue: AsyncQueue, clock: ManualClock, raw: Raw, keyed: bool
) -> None:
    """With a key the forged purge event's hash is not keyed; without one it still lacks the
    signed purge record retention writes with every purge."""
    q = queue if keyed else plain_queue
    install_keys(q.settings.audit.keyring())
    tasks = await activity(q, clock)
    await forge_purge(q, raw, tasks[1].id, clock)
    report = await q.verify()
    [brk] = report.breaks
    assert (brk.task_id, brk.seq) == (tasks[1].id, 5)
    expected = "not keyed" if keyed else "no signed purge record"
    assert expected in brk.problem


async def test_triggers_left_disabled_or_dropped_are_named(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    await activity(queue, clock)
    assert (await queue.verify()).ok
    if is_sqlite(raw.url):
        raw.execute("DROP TRIGGER aq_events_no_delete")
        gone = "aq_events_no_delete"
    else:
        raw.execute("ALTER TABLE aq_events DISABLE TRIGGER ALL")
        gone = "aq_events_no_update"
    report = await queue.verify()
    assert not report.ok and report.breaks == []
    assert problems_about(report, f"append-only trigger {gone} is missing or disabled")


async def test_a_deleted_or_rewritten_anchor_is_caught_by_the_anchor_file(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, tmp_path: Path
) -> None:
    """Each anchor goes to the file too; the latest one deleted from the database (with the
    events after the one before) no longer matches the file's last line."""
    await activity(queue, clock)
    [first] = await queue.anchor_audit()
    await queue.submit(title="later", task_type="bugfix")
    [second] = await queue.anchor_audit()
    lines = (tmp_path / "anchors.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [first.id, second.id]
    assert (await queue.verify()).ok
    if is_sqlite(raw.url):
        raw.execute("DROP TRIGGER aq_audit_anchors_no_delete")
    raw.execute("DELETE FROM aq_audit_anchors WHERE id = ?", (second.id,), bypass=True)
    raw.execute("DELETE FROM aq_events WHERE gseq > ?", (first.count,), bypass=True)
    raw.execute("DELETE FROM aq_tasks WHERE title = 'later'", bypass=True)
    report = await queue.verify()
    assert problems_about(report, f"anchor {second.id} of the anchor file"), report.problems


async def test_a_forged_anchor_does_not_verify(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    await activity(queue, clock)
    [anchor] = await queue.anchor_audit()
    if is_sqlite(raw.url):
        raw.execute("DROP TRIGGER aq_audit_anchors_no_update")
    raw.execute(
        "UPDATE aq_audit_anchors SET count = count - 1 WHERE id = ?", (anchor.id,), bypass=True
    )
    report = await queue.verify()
    assert problems_about(report, f"audit record {anchor.id} (anchor)"), report.problems


async def test_a_key_rotation_keeps_old_events_verifiable(
    queue: AsyncQueue, clock: ManualClock, db_url: str, tmp_path: Path
) -> None:
    """Events of the old key verify under the new key while the old one is in old_keys, and
    are named when it is not."""
    before = await activity(queue, clock)
    await queue.anchor_audit()
    await queue.close()
    rotated = await open_with(
        db_url, clock, keyed_settings(tmp_path, OTHER_KEY_ENV, [f"env:{KEY_ENV}"])
    )
    try:
        after = (await rotated.submit(title="new", task_type="bugfix")).task
        new_id = hashlib.sha256(OTHER_KEY.encode()).hexdigest()[:8]
        assert (await rotated.get(after.id)).last_hash.startswith(f"{new_id}:")
        await rotated.anchor_audit()
        report = await rotated.verify()
        assert report.ok, (report.breaks, report.problems)
    finally:
        await rotated.close()
    forgotten = await open_with(db_url, clock, keyed_settings(tmp_path, OTHER_KEY_ENV))
    try:
        report = await forgotten.verify()
        assert {b.task_id for b in report.breaks} == {t.id for t in before}
        assert all("not configured" in b.problem for b in report.breaks)
    finally:
        await forgotten.close()


ROW_EDITS = {
    "result": ("result", '{"done": "forged"}'),
    "payload": ("payload", '{"n": 99}'),
    "priority": ("priority", 0),
    "approved_by": ("approved_by", "mallory"),
}


@pytest.mark.parametrize("edit", sorted(ROW_EDITS))
async def test_an_edited_task_row_is_caught_at_its_last_event(
    queue: AsyncQueue, clock: ManualClock, raw: Raw, edit: str
) -> None:
    """The row's result, payload, priority or approved_by changed in the database (no event:
    the chain itself still holds) no longer matches what its last event signed."""
    tasks = await activity(queue, clock)
    victim = next(t for t in tasks if t.title == "t0")  # completed, with a result
    column, value = ROW_EDITS[edit]
    changed = raw.execute(f"UPDATE aq_tasks SET {column} = ? WHERE id = ?", (value, victim.id))
    assert changed == 1
    report = await queue.verify()
    [brk] = report.breaks
    assert (brk.task_id, brk.seq) == (victim.id, 4)
    assert "differ from those its last event signed" in brk.problem


async def test_row_fields_are_signed_by_events_written_on_every_path(
    queue: AsyncQueue, clock: ManualClock, raw: Raw
) -> None:
    """Submit, admit, claim, complete and fail (the set-wise SQL and the Python paths) each
    leave the row signed: a fresh verify holds, and the head event carries a row_mac."""
    tasks = await activity(queue, clock)
    for task in tasks:
        mac = raw.scalar("SELECT row_mac FROM aq_events WHERE task_id = ? AND seq = 4", (task.id,))
        assert mac and mac.startswith(hashlib.sha256(KEY.encode()).hexdigest()[:8] + ":")
    pending = (await queue.submit(title="just submitted", task_type="bugfix")).task
    assert (await queue.verify()).ok
    raw.execute("UPDATE aq_tasks SET priority = 0 WHERE id = ?", (pending.id,))
    [brk] = (await queue.verify()).breaks
    assert (brk.task_id, brk.seq) == (pending.id, 1)
