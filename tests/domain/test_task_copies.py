"""The cheap copies the worker makes of a task on every attempt: the handler's own payload
(json_copy) and the task id's text kept with the task (Task.id_text)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from decimal import Decimal
from uuid import UUID

import pytest
from task_factory import TASK_ID, make_task

from agentqueue.domain.values import json_copy

NESTED = {
    "issue": 12,
    "labels": ["bug", "ui"],
    "steps": [{"name": "fetch", "args": {"urls": ["a", "b"]}}, None, True, 1.5],
    "": {"deep": [[{"x": []}]]},
}


def test_json_copy_equals_the_value_and_shares_no_container_with_it() -> None:
    copied = json_copy(NESTED)
    assert copied == NESTED == copy.deepcopy(NESTED)
    # Every dict and list is new: mutating the copy anywhere leaves the original as it was.
    before = copy.deepcopy(NESTED)
    copied["labels"].append("mutated")
    copied["steps"][0]["args"]["urls"][0] = "z"
    copied[""]["deep"][0][0]["x"].append(1)
    copied["new"] = 1
    assert before == NESTED


def test_json_copy_of_scalars_and_empty_containers() -> None:
    for value in ("text", 0, -3, 2.5, True, False, None):
        assert json_copy(value) == value
    empty: dict[str, object] = {}
    assert json_copy(empty) == {} and json_copy(empty) is not empty
    listed: list[object] = []
    assert json_copy(listed) == [] and json_copy(listed) is not listed


def test_json_copy_deep_copies_what_is_not_json() -> None:
    # Not a JSON type (a handler's own test may pass anything): copied as deepcopy would.
    odd = {"at": [datetime(2026, 1, 1, tzinfo=UTC)], "n": Decimal("1.5"), "t": ([1],)}
    copied = json_copy(odd)
    assert copied == odd
    copied["t"][0].append(2)
    assert odd["t"] == ([1],)


def test_id_text_is_the_ids_text_and_follows_a_changed_id() -> None:
    task = make_task()
    assert task.id_text == str(TASK_ID)
    assert task.id_text == str(TASK_ID)  # kept: the same text again
    kept = task.evolve(priority=1)
    assert kept.id_text == str(TASK_ID)
    other = UUID(int=42)
    moved = task.evolve(id=other)
    assert moved.id_text == str(other)
    # The kept text is no field: equality, repr and JSON are those of the fields alone.
    assert task == make_task()
    assert "_id_text" not in repr(task)
    assert task.to_json() == make_task().to_json()


def test_evolve_still_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        make_task().evolve(colour="red")
