"""Retries (R7): backoff delays with jitter, retry limits, and which errors are retryable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentqueue.domain.retry import (
    RETRYABLE_EXIT_CODE,
    BackoffPolicy,
    exception_is_retryable,
    exit_code_is_retryable,
    retries_left,
    retry_limit,
)


@pytest.mark.parametrize("retry_number", range(12))
def test_backoff_without_jitter_is_two_to_the_n_capped_at_30_seconds(retry_number: int) -> None:
    assert BackoffPolicy().delay(retry_number, 0.5) == min(2**retry_number, 30)


def test_backoff_reaches_the_cap_at_the_fifth_retry() -> None:
    policy = BackoffPolicy()
    assert [policy.delay(n, 0.5) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]


@given(
    retry_number=st.integers(min_value=0, max_value=100),
    spread=st.floats(min_value=0, max_value=1, exclude_max=True, allow_nan=False),
)
def test_jitter_keeps_the_delay_within_ten_percent_by_default(
    retry_number: int, spread: float
) -> None:
    raw = min(2**retry_number, 30)
    delay = BackoffPolicy().delay(retry_number, spread)
    assert raw * 0.9 - 1e-9 <= delay <= raw * 1.1 + 1e-9


def test_jitter_spreads_delays_across_the_whole_band() -> None:
    policy = BackoffPolicy()
    assert policy.delay(3, 0.0) == pytest.approx(8 * 0.9)
    assert policy.delay(3, 0.999999) == pytest.approx(8 * 1.1, rel=1e-5)
    assert policy.delay(3, 0.25) < policy.delay(3, 0.5) < policy.delay(3, 0.75)


def test_backoff_is_configurable() -> None:
    policy = BackoffPolicy(base=3.0, cap=60.0, jitter=0.0)
    assert [policy.delay(n, 0.9) for n in (1, 2, 3, 4)] == [3, 9, 27, 60]


def test_p0_tasks_get_at_most_three_retries() -> None:
    assert retry_limit(5, priority=0) == 3
    assert retry_limit(2, priority=0) == 2
    assert retry_limit(5, priority=1) == 5
    assert retries_left(2, 5, priority=0)
    assert not retries_left(3, 5, priority=0)
    assert retries_left(3, 5, priority=4)
    assert not retries_left(0, 0, priority=4)


def test_exit_code_75_is_retryable_and_other_codes_are_not() -> None:
    assert RETRYABLE_EXIT_CODE == 75
    assert exit_code_is_retryable(75)
    for code in (0, 1, 2, 74, 76, 137, -9):
        assert not exit_code_is_retryable(code)
    assert exit_code_is_retryable(3, retryable_codes=frozenset({3}))


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError("slow"),
        ConnectionError("down"),
        ConnectionResetError(),
        ConnectionRefusedError(),
        BrokenPipeError(),
    ],
)
def test_timeouts_and_connection_errors_are_retryable(exc: BaseException) -> None:
    assert exception_is_retryable(exc)


@pytest.mark.parametrize(
    "exc", [ValueError("bad"), KeyError("x"), RuntimeError(), OSError("disk"), Exception()]
)
def test_other_exceptions_are_not_retryable(exc: BaseException) -> None:
    assert not exception_is_retryable(exc)


class _Verdict(Exception):
    def __init__(self, retryable: object) -> None:
        super().__init__("handler decided")
        self.retryable = retryable


class _FatalTimeout(TimeoutError):
    retryable = False


def test_an_exception_carrying_retryable_decides_for_itself() -> None:
    assert exception_is_retryable(_Verdict(True))
    assert not exception_is_retryable(_Verdict(False))
    assert not exception_is_retryable(_FatalTimeout())


def test_a_retryable_attribute_that_is_not_a_bool_is_ignored() -> None:
    assert not exception_is_retryable(_Verdict("yes"))
    assert not exception_is_retryable(_Verdict(None))
