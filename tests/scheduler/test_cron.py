"""Cron schedules (R18): slots in a time zone, catch-up of missed slots, exactly one task per slot
with several schedulers, input validation, and the ``schedules`` commands, on both backends."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentqueue import AsyncQueue, InvalidInput, ManualClock, NotFound, StoreError
from agentqueue.cli import main
from agentqueue.config import Settings
from agentqueue.domain.schedule import CatchUp
from agentqueue.intake.cron import CronSlots, load_zone, plan, problems, slot_key
from agentqueue.store.sqlfile import load_queries

TASK = {"title": "Nightly dependency audit", "task_type": "review", "payload": {"repo": "o/r"}}


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


async def cron_tasks(q: AsyncQueue) -> list[Any]:
    return (await q.list(source="cron", limit=1000)).items


@pytest.fixture
async def second(db_url: str, clock: ManualClock, settings: Settings) -> AsyncIterator[AsyncQueue]:
    """Another scheduler: its own AsyncQueue (own connections) on the same database and clock."""
    q = AsyncQueue(db_url, clock=clock, settings=settings)
    await q.open()
    yield q
    await q.close()


@pytest.fixture
def open_tenant(db_url: str, clock: ManualClock, settings: Settings) -> Any:
    """Open an AsyncQueue scoped to one tenant on the test's database."""

    @asynccontextmanager
    async def make(tenant: str) -> AsyncIterator[AsyncQueue]:
        q = AsyncQueue(db_url, clock=clock, settings=settings, tenant=tenant)
        await q.open()
        try:
            yield q
        finally:
            await q.close()

    return make


# --- slots (pure) ---------------------------------------------------------------------------


def test_a_shanghai_morning_slot_is_one_in_the_morning_utc() -> None:
    slots = CronSlots("0 9 * * *", load_zone("Asia/Shanghai"))
    assert slots.next_after(utc(2026, 3, 1, 9)) == utc(2026, 3, 2, 1)
    assert slots.next_after(utc(2026, 3, 2, 1)) == utc(2026, 3, 3, 1)
    assert slots.last_at_or_before(utc(2026, 3, 2, 1)) == utc(2026, 3, 2, 1)
    assert slots.last_at_or_before(utc(2026, 3, 2, 0, 59)) == utc(2026, 3, 1, 1)


def test_a_wall_time_skipped_by_the_clock_change_fires_at_the_end_of_the_gap() -> None:
    # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC); 02:30 never happens.
    daily = CronSlots("30 2 * * *", load_zone("America/New_York"))
    assert daily.next_after(utc(2026, 3, 7, 12)) == utc(2026, 3, 8, 7)
    assert daily.next_after(utc(2026, 3, 8, 7)) == utc(2026, 3, 9, 6, 30)
    every_half_hour = CronSlots("*/30 * * * *", load_zone("America/New_York"))
    seen, at = [], utc(2026, 3, 8, 5, 45)
    for _ in range(4):
        at = every_half_hour.next_after(at)
        seen.append(at)
    # 02:00 and 02:30 EST do not exist: one slot at 03:00 EDT, then on as usual.
    assert seen == [utc(2026, 3, 8, 6), utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7),
                    utc(2026, 3, 8, 7, 30)]  # fmt: skip


def test_a_wall_time_that_happens_twice_is_one_slot_at_its_first_occurrence() -> None:
    # New York, 2026-11-01: 02:00 EDT goes back to 01:00 EST (06:00 UTC); 01:30 happens twice.
    daily = CronSlots("30 1 * * *", load_zone("America/New_York"))
    first = daily.next_after(utc(2026, 11, 1, 4))
    assert first == utc(2026, 11, 1, 5, 30)
    assert daily.next_after(first) == utc(2026, 11, 2, 6, 30)
    # Read from inside the second pass of the hour: its slot already was.
    assert daily.next_after(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 2, 6, 30)
    assert daily.last_at_or_before(utc(2026, 11, 1, 6, 40)) == utc(2026, 11, 1, 5, 30)


def test_plan_fires_on_time_slots_and_catches_up_by_setting() -> None:
    slots = CronSlots("*/5 * * * *", load_zone("UTC"))
    due = utc(2026, 3, 1, 9, 5)
    on_time = plan(slots, due, due + timedelta(seconds=30), CatchUp.SKIP)
    assert on_time is not None and on_time.slots == (due,)
    assert on_time.next_at == utc(2026, 3, 1, 9, 10)
    assert plan(slots, due, due - timedelta(seconds=1), CatchUp.SKIP) is None
    late = due + timedelta(minutes=17)  # 09:22: 09:05 ... 09:20 were missed
    skipped = plan(slots, due, late, CatchUp.SKIP)
    assert skipped is not None and skipped.slots == ()
    assert skipped.next_at == utc(2026, 3, 1, 9, 25)
    once = plan(slots, due, late, CatchUp.ONCE)
    assert once is not None and once.slots == (utc(2026, 3, 1, 9, 20),)
    assert once.next_at == utc(2026, 3, 1, 9, 25)
    assert slot_key("nightly", utc(2026, 3, 1, 9, 20)) == "cron:nightly:2026-03-01T09:20:00Z"


def test_expressions_and_zones_are_checked() -> None:
    assert problems("*/5 * * * *", "Asia/Shanghai") == []
    assert problems("@daily", "UTC") == []
    assert [p.field for p in problems("* * *", "UTC")] == ["cron"]
    assert [p.field for p in problems("61 * * * *", "UTC")] == ["cron"]
    assert [p.field for p in problems("R * * * *", "UTC")] == ["cron"]  # random per process
    assert [p.field for p in problems("* * * * * *", "UTC")] == ["cron"]  # seconds
    assert [p.field for p in problems("0 0 31 2 *", "UTC", utc(2026, 1, 1))] == ["cron"]
    assert [p.field for p in problems("* * * * *", "Mars/Base")] == ["tz"]
    assert [p.field for p in problems("* * * * *", "localtime")] == ["tz"]
    assert [p.field for p in problems("x", "../etc")] == ["cron", "tz"]


# --- firing on both backends ----------------------------------------------------------------


async def test_two_schedulers_fire_each_of_100_slots_exactly_once(
    queue: AsyncQueue, second: AsyncQueue, clock: ManualClock
) -> None:
    added = await queue.add_schedule("every5", cron="*/5 * * * *", task=TASK)
    assert added.next_at == utc(2026, 3, 1, 9, 5)
    slot = added.next_at
    expected = []
    for _ in range(100):
        clock.set(slot)
        both = await asyncio.gather(queue.fire_schedules(), second.fire_schedules())
        again = [await queue.fire_schedules(), await second.fire_schedules()]
        assert sum(both) == 1 and again == [0, 0], slot
        expected.append(slot_key("every5", slot))
        slot += timedelta(minutes=5)
    tasks = await cron_tasks(queue)
    assert len(tasks) == 100
    assert sorted(t.idempotency_key for t in tasks) == sorted(expected)
    [schedule] = await second.schedules()
    assert schedule.next_at == slot
    assert schedule.last_slot_at == slot - timedelta(minutes=5)


async def test_fired_tasks_come_from_cron_with_the_template_fields(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    template = {**TASK, "priority": "P0", "assignee": "auditor", "timeout_secs": 90}
    await queue.add_schedule("audit", cron="0 * * * *", task=template, tenant="acme")
    await queue.add_schedule("twin", cron="0 * * * *", task=template, tenant="acme")
    clock.set(utc(2026, 3, 1, 10))
    assert await queue.fire_schedules() == 2
    tasks = {t.idempotency_key: t for t in await cron_tasks(queue)}
    task = tasks["cron:audit:2026-03-01T10:00:00Z"]
    assert "cron:twin:2026-03-01T10:00:00Z" in tasks  # no source dedup between schedules
    assert (task.source, task.source_id, task.requested_by) == ("cron", None, "cron")
    assert (task.tenant, task.title, task.task_type) == ("acme", TASK["title"], "review")
    assert (task.priority, task.assignee, task.timeout_secs) == (0, "auditor", 90)
    assert task.payload == {"repo": "o/r"}
    events = await queue.events(task.id)
    assert events[0].actor == "cron"


async def test_skip_drops_missed_slots_and_fires_a_slightly_late_one(
    queue: AsyncQueue, second: AsyncQueue, clock: ManualClock
) -> None:
    await queue.add_schedule("every5", cron="*/5 * * * *", task=TASK)
    clock.set(utc(2026, 3, 1, 9, 5))
    assert await queue.fire_schedules() == 1
    clock.set(utc(2026, 3, 1, 9, 32, 30))  # down across 09:10 ... 09:30
    assert await asyncio.gather(queue.fire_schedules(), second.fire_schedules()) == [0, 0]
    [schedule] = await queue.schedules()
    assert schedule.next_at == utc(2026, 3, 1, 9, 35)
    clock.set(utc(2026, 3, 1, 9, 35, 45))  # 45 s late: within the misfire grace
    assert await queue.fire_schedules() == 1
    keys = sorted(t.idempotency_key for t in await cron_tasks(queue))
    assert keys == ["cron:every5:2026-03-01T09:05:00Z", "cron:every5:2026-03-01T09:35:00Z"]


async def test_once_fires_only_the_latest_missed_slot(
    queue: AsyncQueue, second: AsyncQueue, clock: ManualClock
) -> None:
    await queue.add_schedule("every5", cron="*/5 * * * *", task=TASK, catch_up="once")
    clock.set(utc(2026, 3, 1, 9, 32, 30))  # 09:05 ... 09:30 all missed
    assert sum(await asyncio.gather(queue.fire_schedules(), second.fire_schedules())) == 1
    assert await queue.fire_schedules() == 0
    [task] = await cron_tasks(queue)
    assert task.idempotency_key == "cron:every5:2026-03-01T09:30:00Z"
    [schedule] = await queue.schedules()
    assert schedule.catch_up is CatchUp.ONCE
    assert schedule.next_at == utc(2026, 3, 1, 9, 35)
    assert schedule.last_slot_at == utc(2026, 3, 1, 9, 30)
    assert schedule.last_fired_at == utc(2026, 3, 1, 9, 32, 30)


async def test_a_shanghai_nine_oclock_schedule_fires_at_one_utc(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    added = await queue.add_schedule("morning", cron="0 9 * * *", tz="Asia/Shanghai", task=TASK)
    assert added.next_at == utc(2026, 3, 2, 1)
    clock.set(utc(2026, 3, 2, 0, 59, 59))
    assert await queue.fire_schedules() == 0
    clock.set(utc(2026, 3, 2, 1))
    assert await queue.fire_schedules() == 1
    [task] = await cron_tasks(queue)
    assert task.idempotency_key == "cron:morning:2026-03-02T01:00:00Z"
    assert task.created_at == utc(2026, 3, 2, 1)


async def test_a_scheduler_that_dies_before_moving_on_leaves_no_duplicate(
    queue: AsyncQueue, second: AsyncQueue, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await queue.add_schedule("every5", cron="*/5 * * * *", task=TASK)
    clock.set(utc(2026, 3, 1, 9, 5))

    async def lost(*args: Any) -> bool:
        raise StoreError("connection lost")

    monkeypatch.setattr(queue.store, "advance_schedule", lost)
    with pytest.raises(StoreError):
        await queue.fire_schedules()
    assert len(await cron_tasks(queue)) == 1  # submitted, not moved on
    assert await second.fire_schedules() == 0  # the same slot matches the task
    [schedule] = await second.schedules()
    assert schedule.next_at == utc(2026, 3, 1, 9, 10)
    assert len(await cron_tasks(second)) == 1


async def test_removed_schedules_fire_no_more_and_tenants_are_apart(
    queue: AsyncQueue, open_tenant: Any, clock: ManualClock
) -> None:
    await queue.add_schedule("hourly", cron="@hourly", task=TASK, tenant="acme")
    await queue.add_schedule("hourly", cron="@hourly", task=TASK, tenant="globex")
    async with open_tenant("globex") as globex:
        assert [s.tenant for s in await globex.schedules()] == ["globex"]
        with pytest.raises(InvalidInput) as refused:
            await globex.schedules(tenant="acme")
        assert refused.value.fields == ["tenant"]
        removed = await globex.remove_schedule("hourly")
        assert (removed.tenant, removed.name) == ("globex", "hourly")
        with pytest.raises(NotFound):
            await globex.remove_schedule("hourly")
    assert [(s.tenant, s.name) for s in await queue.schedules()] == [("acme", "hourly")]
    clock.set(utc(2026, 3, 1, 10))
    assert await queue.fire_schedules() == 1
    assert [t.tenant for t in await cron_tasks(queue)] == ["acme"]


BAD_SCHEDULES: list[tuple[dict[str, Any], list[str]]] = [
    ({"cron": "61 * * * *"}, ["cron"]),
    ({"cron": "* * *"}, ["cron"]),
    ({"cron": "0 0 31 2 *"}, ["cron"]),
    ({"tz": "Mars/Base"}, ["tz"]),
    ({"catch_up": "twice"}, ["catch_up"]),
    ({"name": "bad name!"}, ["name"]),
    ({"tenant": "no tenant"}, ["tenant"]),
    ({"task": {"task_type": "docs"}}, ["task.title"]),
    ({"task": {**TASK, "priority": 12}}, ["task.priority"]),
    ({"task": {**TASK, "titel": "typo"}}, ["task.titel"]),
    ({"task": {**TASK, "payload": "text"}}, ["task.payload"]),
    ({"task": {**TASK, "idempotency_key": "k"}}, ["task.idempotency_key"]),
    ({"task": {**TASK, "run_after": "2030-01-01T00:00:00Z"}}, ["task.run_after"]),
    ({"task": ["not", "an", "object"]}, ["task"]),
    (
        {"cron": "* * *", "tz": "Nowhere", "task": {}},
        ["cron", "tz", "task.title", "task.task_type"],
    ),
]


@pytest.mark.parametrize(
    ("change", "fields"), BAD_SCHEDULES, ids=["+".join(f) for _, f in BAD_SCHEDULES]
)
async def test_bad_schedules_are_refused_naming_the_field_and_nothing_is_written(
    queue: AsyncQueue, change: dict[str, Any], fields: list[str]
) -> None:
    options: dict[str, Any] = {"name": "nightly", "cron": "0 2 * * *", "task": TASK, **change}
    name = options.pop("name")
    with pytest.raises(InvalidInput) as refused:
        await queue.add_schedule(name, **options)
    assert refused.value.fields == fields
    assert await queue.schedules() == []


async def test_a_name_is_used_once_per_tenant(queue: AsyncQueue) -> None:
    first = await queue.add_schedule("nightly", cron="0 2 * * *", task=TASK)
    with pytest.raises(InvalidInput) as refused:
        await queue.add_schedule("nightly", cron="0 3 * * *", task=TASK)
    assert refused.value.fields == ["name"]
    assert await queue.schedules() == [first]
    await queue.add_schedule("nightly", cron="0 3 * * *", task=TASK, tenant="acme")
    assert len(await queue.schedules()) == 2


def test_the_due_read_is_one_index_probe(tmp_path: Any) -> None:
    from agentqueue import Queue

    url = f"sqlite:///{tmp_path / 'plan.db'}"
    with Queue(url) as q:
        q.open()  # migrates
    with sqlite3.connect(tmp_path / "plan.db") as conn:
        plan_rows = conn.execute(
            "EXPLAIN QUERY PLAN " + load_queries("sqlite")["due_schedules"],
            {"now": 0, "limit": 100},
        ).fetchall()
    detail = " ".join(str(row[-1]) for row in plan_rows)
    assert "USING INDEX aq_schedules_due" in detail and "TEMP B-TREE" not in detail


# --- the schedules commands -----------------------------------------------------------------


def cli(db: str, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["--db", db, "--actor", "tester", *args], catch_exceptions=False
    )


def test_cli_adds_lists_and_removes_schedules(db_url: str) -> None:
    add = cli(
        db_url, "schedules", "add", "morning", "--cron", "0 9 * * *", "--tz", "Asia/Shanghai",
        "--task", json.dumps(TASK), "--catch-up", "once", "--tenant", "acme", "--json",
    )  # fmt: skip
    assert add.exit_code == 0, add.output
    added = json.loads(add.stdout)
    assert (added["name"], added["tenant"], added["tz"]) == ("morning", "acme", "Asia/Shanghai")
    assert added["catch_up"] == "once" and added["task"] == TASK
    assert added["created_by"] == "tester"
    assert datetime.fromisoformat(added["next_at"]).astimezone(UTC).hour == 1
    human_add = cli(db_url, "schedules", "add", "hourly", "--cron", "@hourly", "--task",
                    json.dumps(TASK))  # fmt: skip
    assert human_add.exit_code == 0 and "added schedule hourly" in human_add.stdout

    listed = cli(db_url, "schedules", "list", "--json")
    assert listed.exit_code == 0
    assert [(s["tenant"], s["name"]) for s in json.loads(listed.stdout)] == [
        ("acme", "morning"),
        ("default", "hourly"),
    ]
    only_acme = json.loads(cli(db_url, "schedules", "list", "--tenant", "acme", "--json").stdout)
    assert [s["name"] for s in only_acme] == ["morning"]
    table = cli(db_url, "schedules", "list")
    assert table.exit_code == 0
    assert "NAME" in table.stdout and "morning" in table.stdout and "Asia/Shanghai" in table.stdout

    removed = cli(db_url, "schedules", "rm", "morning", "--tenant", "acme")
    assert removed.exit_code == 0 and "removed schedule morning" in removed.stdout
    again = cli(db_url, "schedules", "rm", "morning", "--tenant", "acme")
    assert again.exit_code == 1 and "no schedule 'morning'" in again.stderr
    remaining = json.loads(cli(db_url, "schedules", "list", "--json").stdout)
    assert [s["name"] for s in remaining] == ["hourly"]


CLI_BAD = [
    (["--cron", "61 * * * *"], "cron"),
    (["--tz", "Mars/Base"], "tz"),
    (["--task", "{nope"], "task"),
    (["--task", '{"task_type": "docs"}'], "task.title"),
    (["--catch-up", "twice"], "--catch-up"),
]


@pytest.mark.parametrize(("args", "field"), CLI_BAD, ids=[f for _, f in CLI_BAD])
def test_cli_refuses_bad_schedules_with_exit_2_naming_the_field(
    db_url: str, args: list[str], field: str
) -> None:
    base = {"--cron": "*/5 * * * *", "--task": json.dumps(TASK)}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [item for pair in base.items() for item in pair]
    result = cli(db_url, "schedules", "add", "nightly", *flat)
    assert result.exit_code == 2, result.output
    assert field in result.stderr and "Traceback" not in result.output
    assert json.loads(cli(db_url, "schedules", "list", "--json").stdout) == []


def test_cli_requires_cron_and_task(db_url: str) -> None:
    result = cli(db_url, "schedules", "add", "nightly", "--task", json.dumps(TASK))
    assert result.exit_code == 2 and "--cron" in result.stderr
