"""A batch of transitions is one record written as one line per task, in text and JSON, with
the fields named in the README, a failure's traceback, secrets masked, and no line when INFO is
off."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agentqueue.domain.models import Task
from agentqueue.domain.states import TaskState
from agentqueue.logsetup import configure
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.worker import transitions

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SECRET = "pw-in-the-error-9431"
TRACE = f'Traceback (most recent call last):\n  File "app.py", line 3\nValueError: {SECRET}\n'


def _task(state: TaskState, **changes: object) -> Task:
    task = Task(
        id=uuid.uuid4(), tenant="default", source="api", source_id=None, title="t",
        task_type="bugfix", payload={}, priority=5, state=state, max_retries=3, retry_count=1,
        timeout_secs=60, created_at=NOW, updated_at=NOW, eligible_at=NOW - timedelta(seconds=2),
        requested_by="me", locked_at=NOW, agent="fixer",
    )  # fmt: skip
    return task.evolve(**changes)


@pytest.fixture
def root() -> Iterator[None]:
    logger = logging.getLogger()
    saved = list(logger.handlers), logger.level
    yield
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    for handler in saved[0]:
        logger.addHandler(handler)
    logger.setLevel(saved[1])


def _batch() -> tuple[list[Outcome], dict[uuid.UUID, object]]:
    done = _task(TaskState.EXECUTING)
    failed = _task(TaskState.EXECUTING)
    outcomes = [
        Outcome(done.id, uuid.uuid4(), OutcomeKind.COMPLETED, claimed=done),
        Outcome(
            failed.id,
            uuid.uuid4(),
            OutcomeKind.FAILED,
            error=f"ValueError: {SECRET}",
            claimed=failed,
            traceback=TRACE,
        ),
    ]
    later = NOW + timedelta(milliseconds=250)
    answers: dict[uuid.UUID, object] = {
        done.id: done.evolve(state=TaskState.COMPLETED, updated_at=later),
        failed.id: failed.evolve(state=TaskState.RETRYING, updated_at=later),
    }
    return outcomes, answers


def test_json_one_line_per_transition_with_its_fields(root: None) -> None:
    stream = io.StringIO()
    configure("json", "INFO", stream=stream, environ={"APP_PASSWORD": SECRET})
    claimed = _task(TaskState.EXECUTING)
    transitions.claimed([claimed])
    outcomes, answers = _batch()
    transitions.recorded(outcomes, answers)  # type: ignore[arg-type]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["from"], x["to"]) for x in lines] == [
        ("queued", "executing"), ("executing", "completed"), ("executing", "retrying"),
    ]  # fmt: skip
    assert lines[0]["duration_ms"] == 2000.0 and lines[1]["duration_ms"] == 250.0
    for line in lines:
        assert line["task_type"] == "bugfix" and line["agent"] == "fixer" and line["attempt"] == 2
        assert line["level"] == "INFO" and line["logger"] == "agentqueue.worker.transitions"
    assert lines[2]["error"] == "ValueError: ***"
    assert lines[2]["traceback"].endswith("ValueError: ***\n")
    assert SECRET not in stream.getvalue()


def test_text_one_line_per_transition_and_the_traceback_after(root: None) -> None:
    stream = io.StringIO()
    configure("text", "INFO", stream=stream, environ={"APP_PASSWORD": SECRET})
    outcomes, answers = _batch()
    transitions.recorded(outcomes, answers)  # type: ignore[arg-type]
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(
        f"INFO agentqueue.worker.transitions: task {outcomes[0].task_id} bugfix agent fixer "
        "attempt 2: executing -> completed (250.0 ms)"
    )
    assert lines[1].endswith("executing -> retrying (250.0 ms): ValueError: ***")
    assert lines[2:] == ["Traceback (most recent call last):", '  File "app.py", line 3',
                         "ValueError: ***"]  # fmt: skip


def test_no_line_when_info_is_off(root: None) -> None:
    stream = io.StringIO()
    configure("json", "WARNING", stream=stream)
    transitions.claimed([_task(TaskState.EXECUTING)])
    assert stream.getvalue() == ""
