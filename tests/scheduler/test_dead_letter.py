"""R8 on each backend: a P0 task entering dead_letter raises exactly one alert (an outbox row
written with the change, an error log line, a webhook POST retried until delivered), and dead
letters are purged after their retention while their audit chain stays provable."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.rows import dict_row
from scheduler_helpers import Hook

from agentqueue import (
    AsyncQueue,
    ConfigError,
    ManualClock,
    NotFound,
    Outcome,
    OutcomeKind,
    Queue,
    Task,
    TaskState,
)
from agentqueue.config import Settings, load_settings
from agentqueue.domain.alerts import ALERT_KIND, dead_letter_alert, redact
from agentqueue.domain.audit import GENESIS, PURGE_ACTION, StoredEvent, check_chain, data_text
from agentqueue.domain.deliveries import Delivery
from agentqueue.domain.models import LogRecord
from agentqueue.domain.retention import RetentionPolicy, purge_due, purge_event
from agentqueue.domain.states import Action, Request
from agentqueue.service.records import decide_and_apply

URL_SECRET = "url-secret-4f1e"
PAYLOAD_SECRET = "payload-secret-9a7c"


# --- a webhook receiver ------------------------------------------------------------------------


@pytest.fixture
def hook() -> Iterator[Hook]:
    """A running webhook receiver."""
    h = Hook()
    h.thread.start()
    yield h
    h.server.shutdown()
    h.server.server_close()


@pytest.fixture
def settings(hook: Hook) -> Settings:
    """Tasks wait in pending for admission; alerts go to the local receiver, whose URL carries
    a token that must never be logged."""
    return Settings(
        queue={"admit_on_submit": False},
        alerts={"url": f"{hook.url}?token={URL_SECRET}", "timeout_secs": 5},
    )


@asynccontextmanager
async def another_queue(
    db_url: str, clock: ManualClock, settings: Settings
) -> AsyncIterator[AsyncQueue]:
    """A second queue (its own connections) on the test's database."""
    q = AsyncQueue(db_url, clock=clock, settings=settings)
    await q.open()
    try:
        yield q
    finally:
        await q.close()


@contextmanager
def socket_closed() -> Iterator[int]:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    yield port


# --- raw reads of the database ---------------------------------------------------------------


def rows(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of a query written with ``?`` placeholders, read beside agentqueue."""
    if db_url.startswith("sqlite:"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            values = tuple(str(p) if isinstance(p, UUID) else p for p in params)
            return [dict(r) for r in conn.execute(sql, values).fetchall()]
        finally:
            conn.close()
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as pg:
        return pg.execute(sql.replace("?", "%s").encode(), params).fetchall()


def execute(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> int:
    """Run one statement with the append-only guards of aq_events switched off, as someone with
    direct write access could; return the rows it changed."""
    if db_url.startswith("sqlite:"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=30)
        try:
            conn.execute("DROP TRIGGER IF EXISTS aq_events_no_update")
            conn.execute("DROP TRIGGER IF EXISTS aq_events_no_delete")
            values = tuple(str(p) if isinstance(p, UUID) else p for p in params)
            cur = conn.execute(sql, values)
            conn.commit()
            return cur.rowcount
        finally:
            conn.close()
    with psycopg.connect(db_url, autocommit=True) as pg:
        pg.execute("SET session_replication_role = replica")
        return pg.execute(sql.replace("?", "%s").encode(), params).rowcount


def outbox(db_url: str) -> list[dict[str, Any]]:
    """Every outbox row, oldest first."""
    found = rows(
        db_url,
        "SELECT kind, task_id, event_seq, tenant, url, body, attempts, next_attempt_at,"
        " delivered_at, last_error FROM aq_outbox ORDER BY id",
    )
    for row in found:
        row["task_id"] = UUID(str(row["task_id"]))
        for name in ("next_attempt_at", "delivered_at"):
            row[name] = _time(row[name])
        if isinstance(row["body"], str):
            row["body"] = json.loads(row["body"])
    return found


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)


# --- driving tasks into dead_letter ------------------------------------------------------------


async def dead_letter(
    queue: AsyncQueue,
    *,
    priority: int = 0,
    title: str = "Refund order 1042",
    error: str = "payment provider unreachable",
    payload: dict[str, Any] | None = None,
    logs: bool = False,
) -> Task:
    """Submit a task with no retries, claim it and fail it: it goes straight to dead_letter."""
    fields: dict[str, Any] = {
        "title": title,
        "task_type": "bugfix",
        "priority": priority,
        "max_retries": 0,
        "payload": payload or {"order": 1042},
    }
    if priority == 0:
        fields["idempotency_key"] = f"key-{title}"
    task = (await queue.submit(**fields)).task
    await queue.admit()
    [claimed] = await queue.claim(1, "worker-1")
    assert claimed.id == task.id
    output = (
        [LogRecord(task.id, task.tenant, 1, "stdout", queue.clock.now(), "working on it")]
        if logs
        else []
    )
    outcome = Outcome(task.id, claimed.lock_token, OutcomeKind.FAILED, error=error)
    done = (await queue.finish([outcome], logs=output))[task.id]
    assert isinstance(done, Task) and done.state is TaskState.DEAD_LETTER
    return done


# --- alerts ------------------------------------------------------------------------------------


async def test_a_p0_dead_letter_is_posted_exactly_once(
    queue: AsyncQueue, clock: ManualClock, db_url: str, settings: Settings, hook: Hook
) -> None:
    task = await dead_letter(queue)
    [row] = outbox(db_url)
    assert (row["kind"], row["task_id"], row["url"]) == (ALERT_KIND, task.id, None)
    assert row["event_seq"] == task.event_seq and row["delivered_at"] is None

    async with another_queue(db_url, clock, settings) as other:
        # Two deliverers at once, and again and again: one POST.
        sent = await asyncio.gather(queue.deliver_alerts(), other.deliver_alerts())
        assert sorted(sent) == [0, 1]
        for _ in range(3):
            assert await queue.deliver_alerts() == 0
            assert await other.deliver_alerts() == 0
        clock.advance(3600)
        assert await asyncio.gather(queue.deliver_alerts(), other.deliver_alerts()) == [0, 0]

    assert len(hook.received) == 1
    path, body = hook.received[0]
    assert path == f"/alerts?token={URL_SECRET}"
    assert body == {
        "event": "task.dead_letter",
        "task_id": str(task.id),
        "tenant": task.tenant,
        "title": "Refund order 1042",
        "task_type": "bugfix",
        "priority": 0,
        "error": "payment provider unreachable",
        "retry_count": 0,
        "dead_lettered_at": task.updated_at.isoformat(),
    }
    [row] = outbox(db_url)
    assert row["attempts"] == 1 and row["delivered_at"] is not None and row["last_error"] is None


async def test_a_non_p0_dead_letter_raises_no_alert(
    queue: AsyncQueue, db_url: str, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentqueue.alerts")
    for priority in (1, 5, 9):
        await dead_letter(queue, priority=priority, title=f"background {priority}")
    assert outbox(db_url) == []
    assert await queue.deliver_alerts() == 0
    assert hook.received == [] and caplog.records == []


async def test_a_lapsed_lease_with_no_retries_left_raises_one_alert(
    queue: AsyncQueue, clock: ManualClock, db_url: str, hook: Hook
) -> None:
    task = (
        await queue.submit(
            title="Rotate keys", task_type="bugfix", priority="P0", max_retries=0,
            idempotency_key="rotate-1",
        )
    ).task  # fmt: skip
    await queue.admit()
    await queue.claim(1, "worker-1")
    clock.advance(3600)  # no heartbeat: the lease and the attempt's deadline lapse
    [taken] = await queue.reclaim_lapsed()
    assert taken.state is TaskState.DEAD_LETTER
    assert await queue.reclaim_lapsed() == []
    [row] = outbox(db_url)
    assert row["task_id"] == task.id and row["event_seq"] == taken.event_seq
    assert await queue.deliver_alerts() == 1
    [body] = hook.bodies
    assert body["task_id"] == str(task.id) and "timed out" in body["error"]


@pytest.mark.parametrize("path", [Action.EXHAUST, Action.TOOL_TIMEOUT])
async def test_every_decided_path_into_dead_letter_raises_the_alert(
    queue: AsyncQueue, clock: ManualClock, db_url: str, hook: Hook, path: Action
) -> None:
    # The paths no service drives yet go through the same writer as the others.
    task = (
        await queue.submit(
            title=f"Delete bucket ({path.value})", task_type="bugfix", priority=0,
            max_retries=1 if path is Action.EXHAUST else 0, idempotency_key=path.value,
        )
    ).task  # fmt: skip
    await queue.admit()
    [claimed] = await queue.claim(1, "worker-1")
    if path is Action.EXHAUST:
        assert (await queue.fail(task.id, claimed.lock_token, "flaky")).state is TaskState.RETRYING
        steps = [Request(Action.EXHAUST, clock.now(), actor="scheduler")]
    else:
        steps = [
            Request(
                Action.WAIT_TOOL,
                clock.now(),
                actor="worker-1",
                lock_token=claimed.lock_token,
                tool_call={"id": "call-1", "name": "search", "timeout_secs": 1},
            ),
            Request(
                Action.TOOL_TIMEOUT,
                clock.now() + timedelta(seconds=5),  # past the call's 1 s timeout
                actor="scheduler",
                error="tool timed out",
            ),
        ]
    for step in steps:
        async with queue.store.transaction() as tx:
            await decide_and_apply(tx, await tx.lock([task.id]), lambda _t, r=step: r)
    final = await queue.get(task.id)
    assert final.state is TaskState.DEAD_LETTER
    [row] = outbox(db_url)
    assert (row["task_id"], row["event_seq"]) == (task.id, final.event_seq)
    clock.advance(seconds=5)  # up to the time the last step was decided at
    assert await queue.deliver_alerts() == 1
    assert [b["task_id"] for b in hook.bodies] == [str(task.id)]


async def test_a_failed_delivery_is_retried_after_backoff_until_delivered(
    queue: AsyncQueue, clock: ManualClock, db_url: str, hook: Hook
) -> None:
    hook.statuses = [500, 503]
    task = await dead_letter(queue)

    assert await queue.deliver_alerts() == 0
    [row] = outbox(db_url)
    assert (row["attempts"], row["last_error"], row["delivered_at"]) == (1, "HTTP 500", None)
    assert row["next_attempt_at"] == clock.now() + timedelta(seconds=2)

    assert await queue.deliver_alerts() == 0  # not due yet: nothing is sent
    assert len(hook.received) == 1

    clock.advance(2)
    assert await queue.deliver_alerts() == 0
    [row] = outbox(db_url)
    assert (row["attempts"], row["last_error"]) == (2, "HTTP 503")
    assert row["next_attempt_at"] == clock.now() + timedelta(seconds=4)

    clock.advance(4)
    assert await queue.deliver_alerts() == 1
    [row] = outbox(db_url)
    assert row["attempts"] == 3 and row["delivered_at"] == clock.now()
    assert [b["task_id"] for b in hook.bodies] == [str(task.id)] * 3
    clock.advance(600)
    assert await queue.deliver_alerts() == 0
    assert len(hook.received) == 3


async def test_an_unreachable_webhook_keeps_the_alert_and_backs_off_to_five_minutes(
    db_url: str, clock: ManualClock
) -> None:
    with socket_closed() as port:
        settings = Settings(
            queue={"admit_on_submit": False},
            alerts={"url": f"http://127.0.0.1:{port}/down?token={URL_SECRET}", "timeout_secs": 2},
        )
        async with another_queue(db_url, clock, settings) as queue:
            await dead_letter(queue)
            delays = []
            for _ in range(10):
                before = clock.now()
                assert await queue.deliver_alerts() == 0
                [row] = outbox(db_url)
                delays.append((row["next_attempt_at"] - before).total_seconds())
                clock.set(row["next_attempt_at"])
            assert delays == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
            assert row["attempts"] == 10 and row["delivered_at"] is None
            assert "Connect" in row["last_error"] and URL_SECRET not in row["last_error"]


async def test_the_error_log_line_names_the_task_and_holds_no_secret(
    queue: AsyncQueue, clock: ManualClock, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook.statuses = [500]
    error = f"callback https://billing.example/refund?token={URL_SECRET}x failed: token=abc123"
    task = await dead_letter(queue, error=error, payload={"api_key": PAYLOAD_SECRET})
    assert await queue.deliver_alerts() == 0  # a failed delivery logs a warning too
    clock.advance(2)
    assert await queue.deliver_alerts() == 1

    alerts = [r for r in caplog.records if r.name == "agentqueue.alerts"]
    [line] = [r for r in alerts if r.levelno == logging.ERROR]
    message = line.getMessage()
    for part in (str(task.id), "bugfix", task.tenant, "https://billing.example/refund"):
        assert part in message
    assert any(r.levelno == logging.WARNING and "HTTP 500" in r.getMessage() for r in alerts)
    for secret in (URL_SECRET, PAYLOAD_SECRET, "abc123"):
        assert secret not in caplog.text
    [body] = hook.bodies[1:]
    assert URL_SECRET not in json.dumps(body) and "abc123" not in json.dumps(body)


async def test_without_a_webhook_the_alert_is_logged_and_kept(
    db_url: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="agentqueue.alerts")
    async with another_queue(db_url, clock, Settings(queue={"admit_on_submit": False})) as queue:
        task = await dead_letter(queue)
        assert await queue.deliver_alerts() == 0
    [line] = caplog.records
    assert str(task.id) in line.getMessage()
    [row] = outbox(db_url)
    assert row["attempts"] == 0 and row["delivered_at"] is None


async def test_the_same_alert_written_twice_is_stored_once(
    queue: AsyncQueue, clock: ManualClock, db_url: str
) -> None:
    task = await dead_letter(queue)
    item = Delivery(ALERT_KIND, task.id, task.tenant, task.event_seq, None, {}, clock.now())
    async with queue.store.transaction() as tx:
        assert await tx.enqueue_outbox([item, item]) == 0
    assert len(outbox(db_url)) == 1


# --- retention ---------------------------------------------------------------------------------


async def test_dead_letters_are_purged_after_their_retention(
    queue: AsyncQueue, clock: ManualClock, db_url: str
) -> None:
    normal = await dead_letter(queue, priority=5, title="Tidy docs", logs=True)
    urgent = await dead_letter(queue, priority=0, title="Revoke access", logs=True)
    reviewed = await dead_letter(queue, priority=5, title="Looked at")
    await queue.review(reviewed.id, actor="operator-7")
    assert len(await queue.logs(normal.id)) == 1

    clock.advance(days=7, seconds=-1)
    assert await queue.purge_dead_letters() == 0
    clock.advance(1)
    assert await queue.purge_dead_letters() == 1
    assert await queue.purge_dead_letters() == 0
    with pytest.raises(NotFound):
        await queue.get(normal.id)
    assert (await queue.get(urgent.id)).state is TaskState.DEAD_LETTER
    assert (await queue.get(reviewed.id)).state is TaskState.MANUAL_REVIEW

    events = await queue.events(normal.id)
    last = events[-1]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert (last.action, last.from_state, last.to_state) == (
        PURGE_ACTION,
        TaskState.DEAD_LETTER,
        TaskState.DEAD_LETTER,
    )
    assert last.actor == "scheduler" and last.at == clock.now()
    assert last.data["retention_days"] == 7 and last.data["priority"] == 5
    count = rows(db_url, "SELECT count(*) AS n FROM aq_task_logs WHERE task_id = ?", (normal.id,))
    assert count[0]["n"] == 0

    report = await queue.verify()
    assert report.ok, report.breaks
    assert (report.tasks, report.purged, report.events) == (2, 1, 14)

    clock.advance(days=23, seconds=-1)
    assert await queue.purge_dead_letters() == 0
    clock.advance(1)
    assert await queue.purge_dead_letters() == 1
    with pytest.raises(NotFound):
        await queue.get(urgent.id)
    assert (await queue.events(urgent.id))[-1].data["retention_days"] == 30
    assert (await queue.get(reviewed.id)).state is TaskState.MANUAL_REVIEW
    report = await queue.verify()
    assert report.ok and (report.tasks, report.purged) == (1, 2)


async def test_retention_follows_the_configured_days(db_url: str, clock: ManualClock) -> None:
    settings = Settings(
        queue={"admit_on_submit": False},
        retention={"dead_letter_p0_days": 2, "dead_letter_days": 1},
    )
    async with another_queue(db_url, clock, settings) as queue:
        urgent = await dead_letter(queue)
        normal = await dead_letter(queue, priority=9, title="Background")
        clock.advance(days=1)
        assert await queue.purge_dead_letters() == 1
        assert (await queue.get(urgent.id)).state is TaskState.DEAD_LETTER
        clock.advance(days=1)
        assert await queue.purge_dead_letters(limit=10) == 1
        assert (await queue.stats()).total == 0
        assert {e[-1].action for e in [await queue.events(normal.id)]} == {PURGE_ACTION}


async def test_a_purge_runs_once_even_from_two_queues_at_once(
    queue: AsyncQueue, clock: ManualClock, db_url: str, settings: Settings
) -> None:
    for i in range(6):
        await dead_letter(queue, priority=5, title=f"old {i}")
    clock.advance(days=8)
    async with another_queue(db_url, clock, settings) as other:
        counts = await asyncio.gather(
            queue.purge_dead_letters(limit=4), other.purge_dead_letters(limit=4)
        )
        # Each dead letter is purged by one of them (and one event ends each chain).
        assert all(n <= 4 for n in counts)
        assert sum(counts) + await queue.purge_dead_letters() == 6
    assert (await queue.stats()).total == 0
    report = await queue.verify()
    assert report.ok and report.purged == 6


async def test_tampering_with_a_purged_chain_is_still_caught(
    queue: AsyncQueue, clock: ManualClock, db_url: str
) -> None:
    task = await dead_letter(queue, priority=5)
    clock.advance(days=8)
    assert await queue.purge_dead_letters() == 1
    assert (await queue.verify()).ok

    execute(
        db_url, "UPDATE aq_events SET reason = 'kept' WHERE task_id = ? AND seq = 5", (task.id,)
    )
    [found] = (await queue.verify()).breaks
    assert (found.task_id, found.seq) == (task.id, 5) and "hash" in found.problem


async def test_removing_the_purge_event_leaves_an_orphan_chain(
    queue: AsyncQueue, clock: ManualClock, db_url: str
) -> None:
    task = await dead_letter(queue, priority=5)
    clock.advance(days=8)
    await queue.purge_dead_letters()
    execute(db_url, "DELETE FROM aq_events WHERE task_id = ? AND seq = 5", (task.id,))
    [found] = (await queue.verify()).breaks
    assert (found.task_id, found.seq) == (task.id, 4)
    assert "row is gone" in found.problem


async def test_an_event_after_the_purge_is_caught(
    queue: AsyncQueue, clock: ManualClock, db_url: str
) -> None:
    task = await dead_letter(queue, priority=5)
    clock.advance(days=8)
    await queue.purge_dead_letters()
    execute(
        db_url,
        "INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action, actor,"
        " reason, data, hash) SELECT task_id, 6, tenant, at, from_state, to_state, action,"
        " actor, reason, data, hash FROM aq_events WHERE task_id = ? AND seq = 5",
        (task.id,),
    )
    [found] = (await queue.verify()).breaks
    assert (found.task_id, found.seq) == (task.id, 6)
    assert "after the task was purged" in found.problem


async def test_a_task_row_deleted_without_a_purge_is_caught(queue: AsyncQueue, db_url: str) -> None:
    task = await dead_letter(queue, priority=5)
    execute(db_url, "DELETE FROM aq_tasks WHERE id = ?", (task.id,))
    [found] = (await queue.verify()).breaks
    assert (found.task_id, found.seq) == (task.id, 4)
    assert "row is gone" in found.problem


# --- the pure rules ----------------------------------------------------------------------------


def _stored(events: list[Any]) -> list[StoredEvent]:
    return [
        StoredEvent(
            e.task_id, e.tenant, e.seq, e.at, e.from_state.value if e.from_state else None,
            e.to_state.value, e.action, e.actor, e.reason, e.data_text or data_text(e.data),
            e.hash,
        )
        for e in events
    ]  # fmt: skip


async def test_purge_event_extends_the_chain_and_only_for_due_dead_letters(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = await dead_letter(queue, priority=3)
    chain = _stored(await queue.events(task.id))
    policy = RetentionPolicy(p0_days=30, days=7)
    assert not purge_due(task, clock.now(), policy)
    with pytest.raises(ValueError, match="not a dead letter past its retention"):
        purge_event(task, clock.now(), policy, "scheduler")
    later = clock.now() + timedelta(days=7)
    assert purge_due(task, later, policy)
    assert not purge_due(task.evolve(state=TaskState.MANUAL_REVIEW), later, policy)
    assert not purge_due(task.evolve(priority=0), later, policy)
    event = purge_event(task, later, policy, "scheduler")
    full = [*chain, *_stored([event])]
    assert check_chain(task.id, full, None, None, row_gone=True) is None
    assert check_chain(task.id, chain, None, None, row_gone=True) is not None
    broken = check_chain(task.id, full, task.event_seq, task.last_hash)
    assert broken is not None and "still there" in broken.problem
    assert chain[0].expected_hash(GENESIS) == chain[0].hash


async def test_only_a_p0_task_coming_into_dead_letter_raises_an_alert(queue: AsyncQueue) -> None:
    task = await dead_letter(queue)
    [*_, last] = await queue.events(task.id)
    alert = dead_letter_alert(task, last)
    assert alert is not None and (alert.task_id, alert.event_seq) == (task.id, last.seq)
    assert dead_letter_alert(task.evolve(priority=1), last) is None
    [first, *_] = await queue.events(task.id)
    assert dead_letter_alert(task, first) is None


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "POST https://user:pw@api.example/v1/x?token=abc#frag failed",
            "POST https://api.example/v1/x failed",
        ),
        (
            "api_key=zzz, access_token: 'q1', password=p",
            "api_key=***, access_token: '***', password=***",
        ),
        (
            '{"client_secret": "s3"} Authorization: Bearer abcdefgh12',
            '{"client_secret": "***"} Authorization: *** ***',
        ),
        ("token expired; the password is wrong", "token expired; the password is wrong"),
    ],
)
def test_redact_masks_what_looks_like_a_credential(text: str, masked: str) -> None:
    assert redact(text) == masked


# --- configuration and the sync facade -----------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        (f'[alerts]\nurl = "ftp://hooks.example/x?token={URL_SECRET}"\n', "alerts.url"),
        ('[alerts]\nurl = "https://"\n', "alerts.url"),
        ("[alerts]\ntimeout_secs = 0\n", "alerts.timeout_secs"),
        ("[retention]\ndead_letter_days = 0\n", "retention.dead_letter_days"),
        ("[retention]\ndead_letter_p0_days = -1\n", "retention.dead_letter_p0_days"),
        ("[retention]\nkeep = 3\n", "retention.keep"),
    ],
)
def test_bad_alert_and_retention_settings_name_the_field(
    tmp_path: Path, toml: str, field: str
) -> None:
    path = tmp_path / "agentqueue.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.fields == [field]
    assert URL_SECRET not in str(caught.value)


def test_alert_and_retention_settings_default_and_load(tmp_path: Path) -> None:
    defaults = Settings()
    assert defaults.alerts.url is None and defaults.alerts.timeout_secs == 10
    assert defaults.retention.policy() == RetentionPolicy(30, 7)
    path = tmp_path / "agentqueue.toml"
    path.write_text(
        f'[alerts]\nurl = "https://hooks.example/a?token={URL_SECRET}"\ntimeout_secs = 3\n'
        "[retention]\ndead_letter_p0_days = 60\ndead_letter_days = 14\n"
    )
    loaded = load_settings(path)
    assert loaded.alerts.url == f"https://hooks.example/a?token={URL_SECRET}"
    assert loaded.retention.policy() == RetentionPolicy(60, 14)
    assert URL_SECRET not in repr(loaded)


def test_the_sync_queue_delivers_and_purges(tmp_path: Path, hook: Hook) -> None:
    clock = ManualClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    settings = Settings(queue={"admit_on_submit": False}, alerts={"url": hook.url})
    with Queue(f"sqlite:///{tmp_path / 'q.db'}", clock=clock, settings=settings) as queue:
        task = queue.submit(
            title="Drop table", task_type="bugfix", priority="P0", max_retries=0,
            idempotency_key="drop-1",
        ).task  # fmt: skip
        queue.admit()
        [claimed] = queue.claim(1, "worker-1")
        assert queue.fail(task.id, claimed.lock_token, "refused").state is TaskState.DEAD_LETTER
        assert queue.deliver_alerts() == 1
        assert queue.purge_dead_letters() == 0
        clock.advance(days=30)
        assert queue.purge_dead_letters() == 1
        assert queue.verify().purged == 1
    assert [b["task_id"] for b in hook.bodies] == [str(task.id)]
