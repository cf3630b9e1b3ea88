"""The envelope and the payload apart (R25): every field of a task is either the queue's
(the envelope, which a result may not name) or one an agent may speak of; a result object
naming an envelope field is refused, naming the field."""

from __future__ import annotations

import dataclasses

import pytest

from agentqueue.domain.envelope import AGENT_FIELDS, ENVELOPE_FIELDS, envelope_problem
from agentqueue.domain.models import Task


def test_every_task_field_is_either_the_queue_s_or_the_agent_s() -> None:
    fields = {f.name for f in dataclasses.fields(Task)}
    unclassified = fields - ENVELOPE_FIELDS - AGENT_FIELDS
    assert not unclassified, f"say in domain/envelope.py whose these are: {sorted(unclassified)}"
    assert not ENVELOPE_FIELDS & AGENT_FIELDS
    assert (ENVELOPE_FIELDS | AGENT_FIELDS) - fields == set()


@pytest.mark.parametrize(
    "name",
    ["state", "assignee", "priority", "tenant", "lock_token", "approved_by", "agent", "kind"],
)
def test_a_result_naming_an_envelope_field_is_refused_naming_it(name: str) -> None:
    problem = envelope_problem({"summary": "done", name: "x"})
    assert problem is not None and problem.startswith(f"result.{name}: names a field the queue")


def test_several_named_fields_are_all_said() -> None:
    problem = envelope_problem({"state": "completed", "priority": 0, "assignee": "me"})
    assert problem is not None
    assert problem.startswith("result.assignee (and priority, state): ")


@pytest.mark.parametrize(
    "result",
    [
        None,
        3,
        "done",
        ["state", "priority"],
        {"summary": "ok", "reply": {"title": "Re: hi"}, "reply_id": "x"},
        {"title": "PR opened", "error": None, "result": {"state": "open"}, "checkpoint": 1},
        {"words": 5, "nested": {"priority": 0, "assignee": "a"}},
    ],
)
def test_a_result_of_its_own_is_taken(result: object) -> None:
    assert envelope_problem(result) is None
