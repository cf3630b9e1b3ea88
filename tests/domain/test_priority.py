"""Priorities (R4): names, validation, aging, the P0 lane and FIFO order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentqueue.domain.errors import InvalidInput
from agentqueue.domain.priority import (
    DEFAULT_AGING_INTERVAL_SECS,
    effective_priority,
    lane,
    order_key,
    parse_priority,
    priority_name,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("number", range(10))
def test_parse_priority_accepts_every_number_from_0_to_9(number: int) -> None:
    assert parse_priority(number) == number
    assert parse_priority(str(number)) == number


@pytest.mark.parametrize(
    ("text", "expected"),
    [("P0", 0), ("p0", 0), ("P1", 5), ("p1", 5), ("P2", 9), ("p2", 9), (" P2 ", 9), (" 7 ", 7)],
)
def test_parse_priority_accepts_names_in_any_case_and_numeric_strings(
    text: str, expected: int
) -> None:
    assert parse_priority(text) == expected


@pytest.mark.parametrize(
    "value", [12, -1, 10, "P3", "p9", "12", "-1", "", "high", True, False, 1.5, 1.0, None, [1]]
)
def test_parse_priority_refuses_anything_else_naming_the_priority_field(value: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_priority(value)
    assert raised.value.fields == ["priority"]
    assert "0-9 or P0/P1/P2" in str(raised.value)


def test_parse_priority_names_the_field_it_is_given() -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_priority(12, field="tasks[2].priority")
    assert raised.value.fields == ["tasks[2].priority"]


def test_priority_names_round_trip() -> None:
    assert [priority_name(p) for p in (0, 5, 9, 3)] == ["P0", "P1", "P2", "3"]
    for name in ("P0", "P1", "P2"):
        assert priority_name(parse_priority(name)) == name


def test_a_p5_task_that_waited_30_minutes_ranks_like_p2() -> None:
    assert DEFAULT_AGING_INTERVAL_SECS == 600
    assert effective_priority(5, 30 * 60) == 2
    assert effective_priority(5, 30 * 60 - 1) == 3
    assert effective_priority(5, 0) == 5


def test_aging_uses_the_interval_it_is_given() -> None:
    assert effective_priority(5, 30 * 60, aging_interval_secs=900) == 3


@given(
    priority=st.integers(min_value=1, max_value=9),
    waited=st.floats(min_value=-1e6, max_value=1e9, allow_nan=False),
    interval=st.floats(min_value=1, max_value=1e5, allow_nan=False),
)
def test_aging_never_goes_below_1_outside_the_p0_lane(
    priority: int, waited: float, interval: float
) -> None:
    aged = effective_priority(priority, waited, interval)
    assert 1 <= aged <= priority
    assert lane(priority) == 1


@given(waited=st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_p0_stays_0_and_in_its_own_lane(waited: float) -> None:
    assert effective_priority(0, waited) == 0
    assert lane(0) == 0


@given(
    priority=st.integers(min_value=1, max_value=9),
    a=st.floats(min_value=0, max_value=1e7, allow_nan=False),
    b=st.floats(min_value=0, max_value=1e7, allow_nan=False),
)
def test_waiting_longer_never_ranks_a_task_lower(priority: int, a: float, b: float) -> None:
    shorter, longer = sorted((a, b))
    assert effective_priority(priority, longer) <= effective_priority(priority, shorter)


def _key(priority: int, waited: timedelta, seq: int) -> tuple[int, int, datetime, int]:
    return order_key(priority, NOW - waited, seq, NOW)


def test_the_p0_lane_goes_first_even_against_a_p9_that_waited_days() -> None:
    old_p9 = ("old P9", _key(9, timedelta(days=5), seq=1))
    fresh_p0 = ("fresh P0", _key(0, timedelta(0), seq=2))
    fresh_p1 = ("fresh P1", _key(1, timedelta(0), seq=3))
    order = [name for name, key in sorted([old_p9, fresh_p1, fresh_p0], key=lambda x: x[1])]
    assert order == ["fresh P0", "old P9", "fresh P1"]


def test_same_effective_priority_is_fifo_by_eligible_at_then_seq() -> None:
    tasks = {
        "aged P5, eligible 30 min ago": _key(5, timedelta(minutes=30), seq=9),
        "P2, eligible 1 min ago, seq 4": _key(2, timedelta(minutes=1), seq=4),
        "P2, eligible 1 min ago, seq 3": _key(2, timedelta(minutes=1), seq=3),
        "P3, eligible now": _key(3, timedelta(0), seq=1),
    }
    order = sorted(tasks, key=tasks.__getitem__)
    assert order == [
        "aged P5, eligible 30 min ago",
        "P2, eligible 1 min ago, seq 3",
        "P2, eligible 1 min ago, seq 4",
        "P3, eligible now",
    ]


def test_lower_effective_priority_goes_before_earlier_eligibility() -> None:
    early_p6 = _key(6, timedelta(minutes=5), seq=1)
    late_p4 = _key(4, timedelta(0), seq=2)
    assert late_p4 < early_p6


@given(
    tasks=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=9),
            st.integers(min_value=0, max_value=7 * 24 * 3600),
            st.integers(min_value=0, max_value=10_000),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_no_aged_task_overtakes_a_p0_task(tasks: list[tuple[int, int, int]]) -> None:
    keys = [(p, order_key(p, NOW - timedelta(seconds=w), s, NOW)) for p, w, s in tasks]
    ordered = [p for p, _ in sorted(keys, key=lambda x: x[1])]
    p0_count = ordered.count(0)
    assert ordered[:p0_count] == [0] * p0_count
