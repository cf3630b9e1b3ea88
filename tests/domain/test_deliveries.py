"""What a change calls for (domain.deliveries): which tasks get a reply on GitHub, which ends
raise a callback, how a delivery backs off, and which addresses a callback may not reach."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from task_factory import make_task

from agentqueue.domain.deliveries import (
    backoff_secs,
    deliveries_for,
    forbidden_address,
    github_target,
    needs_delivery,
)
from agentqueue.domain.models import Event
from agentqueue.domain.states import TaskState

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("source", "source_id", "target"),
    [
        ("issue", "octo/hello#7", ("octo", "hello", 7)),
        ("pr", "my-org/repo.js#120", ("my-org", "repo.js", 120)),
        ("api", "octo/hello#7", None),
        ("issue", "octo/hello", None),
        ("issue", "octo/../x#1", None),
        ("issue", "octo/hello#0", None),
        ("issue", None, None),
    ],
)
def test_which_tasks_get_a_reply(source: str, source_id: str | None, target: Any) -> None:
    task = make_task(source=source, source_id=source_id)
    found = github_target(task)
    assert (None if found is None else (found.owner, found.repo, found.number)) == target
    assert needs_delivery(task) is (target is not None)


def _event(task: Any, frm: TaskState, to: TaskState, seq: int = 5) -> Event:
    return Event(task.id, task.tenant, seq, AT, frm, to, "x", "w", "why")


@pytest.mark.parametrize(
    ("frm", "to", "kinds"),
    [
        (TaskState.EXECUTING, TaskState.COMPLETED, ["callback", "github_reply"]),
        (TaskState.EXECUTING, TaskState.FAILED, ["callback", "github_reply"]),
        (TaskState.EXECUTING, TaskState.DEAD_LETTER, ["callback", "github_reply"]),
        (TaskState.QUEUED, TaskState.CANCELLED, ["callback", "github_reply"]),
        (TaskState.EXECUTING, TaskState.RETRYING, []),
        (TaskState.DEAD_LETTER, TaskState.DEAD_LETTER, []),
        (TaskState.DEAD_LETTER, TaskState.ARCHIVED, []),
    ],
)
def test_each_end_calls_for_a_callback_and_a_reply(
    frm: TaskState, to: TaskState, kinds: list[str]
) -> None:
    task = make_task(to, source="issue", source_id="octo/hello#7",
                     callback_url="https://hooks.example.com/cb", id=uuid4())  # fmt: skip
    found = deliveries_for(task, _event(task, frm, to))
    assert [d.kind for d in found] == kinds
    for d in found:
        assert d.event_seq == 5 and d.body["type"] == f"task.{to.value}"


def test_backoff_doubles_up_to_its_ceiling_with_jitter_below() -> None:
    assert [backoff_secs(n, 1.0, 8.0, 0.999999) for n in range(1, 6)] == pytest.approx(
        [1, 2, 4, 8, 8], rel=1e-5
    )
    assert backoff_secs(3, 1.0, 8.0, 0.0) == 2.0


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.1", "169.254.169.254", "fd00:ec2::254", "::1", "fe80::1", "0.0.0.0",
     "224.0.0.5", "::ffff:10.0.0.1", "100.64.0.1", "240.0.0.1"],
)  # fmt: skip
def test_forbidden_addresses(address: str) -> None:
    assert forbidden_address(address) is not None


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:220:1::1"])
def test_public_addresses(address: str) -> None:
    assert forbidden_address(address) is None
