"""The tamper-evident audit chain (R3): check_chain names the first event that does not hold."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest

from agentqueue.domain.audit import (
    GENESIS,
    ChainBreak,
    StoredEvent,
    canonical_json,
    check_chain,
    data_text,
)

TASK = UUID(int=7)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
STEPS = [
    (None, "pending", "submit", "api", "submitted", {"priority": 5}),
    ("pending", "queued", "admit", "scheduler", "", {}),
    ("queued", "executing", "claim", "scheduler", "", {"worker": "w1", "attempt": 1}),
    ("executing", "retrying", "fail", "w1", "boom", {"error": "boom", "retry": 1}),
    ("retrying", "pending", "retry_due", "scheduler", "", {}),
]


def build_chain(steps: list[Any] = STEPS, tenant: str = "default") -> list[StoredEvent]:
    """Events hashed the way a store writes them, each on the previous one's hash."""
    events: list[StoredEvent] = []
    prev = GENESIS
    for seq, (from_state, to_state, action, actor, reason, data) in enumerate(steps, start=1):
        fields: dict[str, Any] = {
            "task_id": TASK,
            "tenant": tenant,
            "seq": seq,
            "at": T0 + timedelta(seconds=seq),
            "from_state": from_state,
            "to_state": to_state,
            "action": action,
            "actor": actor,
            "reason": reason,
            "data_text": data_text(data),
        }
        digest = StoredEvent(**fields, hash="").expected_hash(prev)
        events.append(StoredEvent(**fields, hash=digest))
        prev = digest
    return events


def check(events: list[StoredEvent], **head: Any) -> ChainBreak | None:
    chain = build_chain()
    head_seq = head.get("head_seq", len(chain))
    head_hash = head.get("head_hash", chain[-1].hash)
    return check_chain(TASK, events, head_seq, head_hash, tenant=head.get("tenant"))


def test_a_correctly_built_chain_holds() -> None:
    chain = build_chain()
    assert check(chain) is None
    assert check_chain(TASK, chain, None, None) is None
    assert check_chain(TASK, chain, len(chain), chain[-1].hash, tenant="default") is None


def test_an_empty_chain_holds_when_the_task_records_none() -> None:
    assert check_chain(TASK, [], 0, "") is None


def test_every_event_hash_covers_the_previous_hash() -> None:
    chain = build_chain()
    assert chain[0].expected_hash(GENESIS) == chain[0].hash
    for prev, event in itertools.pairwise(chain):
        assert event.expected_hash(prev.hash) == event.hash
        assert event.expected_hash(GENESIS) != event.hash


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("actor", "intruder"),
        ("reason", "approved by nobody"),
        ("data_text", canonical_json({"worker": "w2", "attempt": 1})),
        ("to_state", "completed"),
        ("at", T0 + timedelta(seconds=3, microseconds=1)),
        ("from_state", "pending"),
        ("action", "complete"),
        ("tenant", "other"),
        ("task_id", UUID(int=8)),
    ],
)
@pytest.mark.parametrize("position", [0, 2, 4])
def test_a_changed_field_names_that_event(field: str, value: Any, position: int) -> None:
    chain = build_chain()
    original = getattr(chain[position], field)
    if field == "at":
        value = original + timedelta(microseconds=1)
    assert value != original
    chain[position] = dataclasses.replace(chain[position], **{field: value})
    found = check(chain)
    assert found is not None
    assert found.seq == position + 1
    assert found.task_id == TASK
    assert "hash does not match" in found.problem


def test_the_same_instant_in_another_zone_is_not_a_change() -> None:
    chain = build_chain()
    shifted = chain[1].at.astimezone(timezone(timedelta(hours=8)))
    chain[1] = dataclasses.replace(chain[1], at=shifted)
    assert check(chain) is None


def test_a_changed_hash_names_that_event() -> None:
    chain = build_chain()
    chain[1] = dataclasses.replace(chain[1], hash="f" * 64)
    found = check(chain)
    assert found is not None and found.seq == 2


def test_a_deleted_middle_event_is_named() -> None:
    chain = build_chain()
    del chain[2]
    found = check(chain)
    assert found is not None
    assert found.seq == 3 and "missing" in found.problem


def test_a_deleted_first_event_is_named() -> None:
    chain = build_chain()[1:]
    found = check(chain)
    assert found is not None and found.seq == 1


def test_a_deleted_last_event_is_named_from_the_head_on_the_task() -> None:
    chain = build_chain()[:-1]
    found = check(chain)
    assert found is not None
    assert found.seq == 5 and "missing" in found.problem
    assert "5" in found.problem


def test_a_deleted_last_event_with_its_head_rewound_is_caught_by_the_head_hash() -> None:
    full = build_chain()
    found = check_chain(TASK, full[:-1], 4, full[-1].hash)
    assert found is not None and found.seq == 4


def test_an_event_the_task_does_not_record_is_named() -> None:
    chain = build_chain()
    found = check(chain, head_seq=4, head_hash=chain[3].hash)
    assert found is not None and found.seq == 5


def test_swapped_order_is_named_at_the_first_displaced_event() -> None:
    chain = build_chain()
    chain[1], chain[2] = chain[2], chain[1]
    found = check(chain)
    assert found is not None and found.seq == 2


def test_swapped_events_renumbered_to_look_in_order_are_named() -> None:
    chain = build_chain()
    first, second = chain[1], chain[2]
    chain[1] = dataclasses.replace(second, seq=2)
    chain[2] = dataclasses.replace(first, seq=3)
    found = check(chain)
    assert found is not None
    assert found.seq == 2 and "hash does not match" in found.problem


def test_a_chain_rebuilt_from_a_changed_event_is_caught_by_the_head_hash() -> None:
    steps = list(STEPS)
    steps[3] = ("executing", "completed", "complete", "w1", "", {})
    forged = build_chain(steps)
    assert check_chain(TASK, forged, None, None) is None  # consistent by itself
    found = check(forged)
    assert found is not None and found.seq == 5
    assert "recorded on the task" in found.problem


def test_a_wrong_head_hash_names_the_last_event() -> None:
    chain = build_chain()
    found = check(chain, head_hash="0" * 63 + "1")
    assert found is not None
    assert found.seq == len(chain)
    assert "recorded on the task" in found.problem


def test_an_event_of_another_tenant_is_named() -> None:
    chain = build_chain(tenant="other")
    found = check(chain, tenant="default")
    assert found is not None and found.seq == 1 and "tenant" in found.problem


def test_the_break_reads_as_task_and_event() -> None:
    found = ChainBreak(TASK, 3, "missing")
    assert str(found) == f"task {TASK} event 3: missing"


def test_event_data_hashes_over_a_canonical_text() -> None:
    assert data_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert data_text({"a": "é", "b": 1}) == data_text({"b": 1, "a": "é"})
