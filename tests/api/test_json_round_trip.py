"""Every record the HTTP API answers with reads back from its JSON as the record it was:
``from_json(x.to_json())`` equals ``x`` (less what the JSON leaves out, said on each), and the
JSON of what was read is the JSON that was sent."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.domain.access import Role, TokenRecord
from agentqueue.domain.audit import ChainBreak
from agentqueue.domain.models import Event, LogRecord, Task
from agentqueue.domain.schedule import CatchUp, Schedule
from agentqueue.domain.states import TaskState
from agentqueue.service.audit import VerifyReport
from agentqueue.service.reads import AgentLoad, Stats, TaskPage
from agentqueue.service.submit import SubmitResult
from agentqueue.service.tokens import NewToken
from agentqueue.store.base import PausedType

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NOT_IN_JSON = ("seq", "event_seq", "last_hash", "lease_expires_at", "tool_deadline_at")
"""Store bookkeeping a task's JSON does not carry (``eligible_at`` is read as created_at)."""


def wire(value: dict[str, Any]) -> dict[str, Any]:
    """What a client reads: the JSON text, parsed again."""
    parsed: dict[str, Any] = json.loads(json.dumps(value))
    return parsed


def bare(task: Task) -> Task:
    """``task`` as its JSON can say it."""
    defaults = {f.name: f.default for f in dataclasses.fields(Task) if f.name in NOT_IN_JSON}
    return task.evolve(**defaults, eligible_at=task.created_at)


def full_task() -> Task:
    """A task with every field the JSON carries set to something other than its default."""
    return Task(
        id=uuid4(),
        tenant="acme",
        source="issue",
        source_id="octo/repo#12",
        title="Fix the login bug",
        task_type="bugfix",
        payload={"issue": 12, "nested": [1, {"a": None}]},
        priority=1,
        state=TaskState.EXECUTING,
        max_retries=2,
        retry_count=1,
        timeout_secs=90,
        created_at=AT,
        updated_at=AT + timedelta(seconds=5),
        eligible_at=AT,
        requested_by="alice",
        lock_token=uuid4(),
        locked_at=AT + timedelta(seconds=1),
        heartbeat_at=AT + timedelta(seconds=2),
        assignee="coder",
        assigned_to="worker-1",
        depends_on=(uuid4(), uuid4()),
        idempotency_key="fix-12",
        callback_url="https://example.com/hook",
        checkpoint={"step": 3},
        tool_calls=({"id": "call-1", "name": "search", "args": {}, "state": "done"},),
        result={"ok": True},
        error="once failed",
        state_reason="claimed",
        hold=None,
        approved_by="bob",
        kind="task",
        labels=("python", "gpu"),
        agent="coder",
        run_after=AT + timedelta(minutes=1),
        started_at=AT + timedelta(seconds=1),
        finished_at=None,
    )


def test_a_task_with_every_field_round_trips() -> None:
    task = full_task()
    back = Task.from_json(wire(task.to_json()))
    assert back == bare(task)
    assert back.to_json() == task.to_json()


def test_a_task_json_with_keys_it_does_not_know_still_reads() -> None:
    task = full_task()
    data = wire(task.to_json()) | {"added_later": {"x": 1}}
    assert Task.from_json(data) == bare(task)


def test_submit_results_and_pages_round_trip() -> None:
    task = full_task()
    for result in (SubmitResult(task, True), SubmitResult(task, False, "idempotency_key")):
        back = SubmitResult.from_json(wire(result.to_json()))
        assert back == dataclasses.replace(result, task=bare(task))
        assert back.to_json() == result.to_json()
    page = TaskPage([task, full_task()], "42")
    back_page = TaskPage.from_json(wire(page.to_json()))
    assert back_page == TaskPage([bare(t) for t in page.items], "42")
    assert TaskPage.from_json(wire(TaskPage([], None).to_json())) == TaskPage([], None)


def test_events_logs_and_stats_round_trip() -> None:
    for before in (None, TaskState.QUEUED):
        event = Event(
            uuid4(), "acme", 3, AT, before, TaskState.EXECUTING, "claim", "worker-1", "why",
            {"worker": "w", "attempt": 1}, "ab" * 32,
        )  # fmt: skip
        back = Event.from_json(wire(event.to_json()))
        assert back == event and back.to_json() == event.to_json()
    record = LogRecord(uuid4(), "acme", 2, "stderr", AT, "line 1\nline 2\n", truncated=True)
    assert LogRecord.from_json(wire(record.to_json())) == record
    stats = Stats({state: i for i, state in enumerate(TaskState)})
    assert Stats.from_json(wire(stats.to_json())) == stats
    load = AgentLoad("coder", ["bugfix", "docs"], ["python"], 4, 2)
    assert AgentLoad.from_json(wire(load.to_json())) == load


def test_schedules_pauses_tokens_and_reports_round_trip() -> None:
    for last in (None, AT + timedelta(hours=1)):
        schedule = Schedule(
            "acme", "nightly", "0 2 * * *", "Europe/Berlin", {"title": "Audit", "task_type": "r"},
            CatchUp.ONCE, AT + timedelta(days=1), "alice", AT, AT, last, last,
        )  # fmt: skip
        assert Schedule.from_json(wire(schedule.to_json())) == schedule
    paused = PausedType("bugfix", AT, "alice", "incident 7")
    assert PausedType.from_json(wire(paused.to_json())) == paused
    for tenant, expires, revoked in ((None, None, None), ("acme", AT, AT)):
        record = TokenRecord(
            uuid4(), "ci", "abcdefghijkl", "hash", Role.OPERATOR, tenant, AT, "alice", expires,
            revoked,
        )  # fmt: skip
        back = TokenRecord.from_json(wire(record.to_json(AT)))
        assert back == dataclasses.replace(record, secret_hash="")  # the hash is never sent
        assert back.to_json(AT) == record.to_json(AT)
        made = NewToken(record, "aq_abcdefghijkl_" + "x" * 43)
        assert NewToken.from_json(wire(made.to_json(AT))) == NewToken(back, made.secret)
    breaks = [
        ChainBreak(uuid4(), 4, "hash does not match:\nline two"),
        ChainBreak(UUID(int=1), 0, "x"),
    ]
    for report in (VerifyReport(10, 40, [], 2), VerifyReport(3, 9, breaks, 0)):
        back_report = VerifyReport.from_json(wire(report.to_json()))
        assert back_report == report and back_report.ok is report.ok


def test_a_break_read_from_other_words_is_refused() -> None:
    with pytest.raises(ValueError, match="not the words of a chain break"):
        ChainBreak.from_text("something else")


async def test_records_a_queue_made_round_trip(tmp_path: Path) -> None:
    """The same through real stores' records (times and JSON as SQLite gives them back)."""
    clock = ManualClock(AT)
    settings = Settings(queue={"admit_on_submit": False})
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", clock=clock, settings=settings) as q:
        made = await q.submit(
            title="Round trip", task_type="docs", payload={"k": [1, 2]}, labels=["a"],
            idempotency_key="rt-1", run_after=AT + timedelta(hours=1),
        )  # fmt: skip
        again = await q.submit(title="Round trip", task_type="docs", idempotency_key="rt-1")
        cancelled = await q.cancel(made.task.id, reason="done with it")
        for result in (made, again):
            assert SubmitResult.from_json(wire(result.to_json())).to_json() == result.to_json()
        assert Task.from_json(wire(cancelled.to_json())) == bare(cancelled)
        for event in await q.events(made.task.id):
            assert Event.from_json(wire(event.to_json())) == event
        page = await q.list()
        assert TaskPage.from_json(wire(page.to_json())).to_json() == page.to_json()
        stats = await q.stats()
        assert Stats.from_json(wire(stats.to_json())) == stats
        token = await q.create_token("rt", role="admin")
        assert NewToken.from_json(wire(token.to_json(AT))).record.to_json(AT) == (
            token.record.to_json(AT)
        )
        added = await q.add_schedule(
            "hourly", cron="@hourly", task={"title": "t", "task_type": "docs"}
        )
        assert Schedule.from_json(wire(added.to_json())) == added
        paused = await q.pause("docs", reason="why")
        assert PausedType.from_json(wire(paused.to_json())) == paused
        report = await q.verify()
        assert VerifyReport.from_json(wire(report.to_json())) == report
