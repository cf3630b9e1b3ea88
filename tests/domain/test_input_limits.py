"""The bounds of domain.limits and the guardrail pattern check, as pure functions."""

from __future__ import annotations

import io
from typing import Any

import pytest

from agentqueue.domain.errors import InvalidInput
from agentqueue.domain.guardrails import Guardrail, blow_up_problem, first_match
from agentqueue.domain.limits import json_problem, read_bounded


@pytest.mark.parametrize(
    "pattern", ["(a+)+$", "(a*)*", "(?:x+)*y", "(a+|b)+", "((a+))+", "(a+){3}", "(?=(a+)+)"]
)
def test_a_repeated_repetition_is_refused(pattern: str) -> None:
    assert blow_up_problem(pattern) is not None


@pytest.mark.parametrize(
    "pattern", [r"(\d+,)*", "a+b+", "(ab)+", "(a{2})+", "删除|drop table|rm -rf", r"\p{L}+"]
)
def test_ordinary_patterns_are_taken(pattern: str) -> None:
    assert blow_up_problem(pattern) is None


def test_a_search_that_runs_out_of_time_counts_as_found() -> None:
    """(a|aa)+$ passes the shape check but backtracks exponentially on a's and a '!': the
    search stops at the time limit and the rule matches, saying so."""
    rule = Guardrail.compile("slow", "(a|aa)+$")
    found = first_match(
        [rule], kind="task", task_type="t", priority=5, title="a" * 60 + "!", payload={}
    )
    assert found is not None and found.timed_out and found.field == "title"
    assert "took longer than" in found.reason


def test_an_endless_stream_is_read_to_the_limit_and_one_byte_more() -> None:
    class Endless(io.RawIOBase):
        served = 0

        def read(self, size: int = -1) -> bytes:
            assert size >= 0, "an unbounded read"
            self.served += size
            return b"\0" * size

    stream = Endless()
    with pytest.raises(InvalidInput) as caught:
        read_bounded(stream, 1000, "payload")  # type: ignore[arg-type]
    assert stream.served == 1001
    assert caught.value.problems[0].field == "payload"


@pytest.mark.parametrize(
    ("value", "where", "words"),
    [
        ({"a": [1, 10**100]}, "a[1]", "more than 100 digits"),
        ({"a": -(10**100) + 1}, None, None),
        ({"f": float("nan")}, "f", "finite"),
        ({"k": ["x", "y\x00"]}, "k[1]", "NUL"),
        ({"k\x00": 1}, "k\\u0000", "NUL"),
    ],
)
def test_json_problem_names_the_place(value: Any, where: str | None, words: str | None) -> None:
    problem = json_problem(value)
    if where is None:
        assert problem is None
    else:
        assert problem is not None and problem[0] == where and words in problem[1]


def test_a_value_nested_past_the_limit_is_refused_without_recursion() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    problem = json_problem({"a": deep})
    assert problem == ("", "is nested more than 512 levels deep")
    within: Any = 1
    for _ in range(511):
        within = [within]
    assert json_problem(within) is None
