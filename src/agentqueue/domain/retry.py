"""Retries (R7): which errors are retryable and how long to wait before the next attempt."""

from __future__ import annotations

from dataclasses import dataclass

P0_MAX_RETRIES = 3
"""A P0 task never gets more than three automatic retries (SPEC section 1)."""

DEFAULT_MAX_RETRIES = 3
RETRYABLE_EXIT_CODE = 75  # EX_TEMPFAIL


@dataclass(frozen=True)
class BackoffPolicy:
    """``min(base ** n, cap)`` seconds before retry ``n`` (1-based), spread by +/- ``jitter``."""

    base: float = 2.0
    cap: float = 30.0
    jitter: float = 0.1

    def delay(self, retry_number: int, spread: float = 0.5) -> float:
        """Seconds to wait before retry ``retry_number``.

        ``spread`` is a number in [0, 1) chosen by the caller (random in production, fixed in
        tests), which keeps this function pure: 0.5 gives the delay without jitter.
        """
        raw = min(self.base ** max(retry_number, 0), self.cap)
        factor = 1.0 + self.jitter * (2.0 * spread - 1.0)
        return max(0.0, raw * factor)


def retry_limit(max_retries: int, priority: int) -> int:
    """The number of automatic retries a task may have: its max_retries, capped at 3 for P0."""
    return min(max_retries, P0_MAX_RETRIES) if priority == 0 else max_retries


def retries_left(retry_count: int, max_retries: int, priority: int) -> bool:
    """Whether one more automatic retry is allowed."""
    return retry_count < retry_limit(max_retries, priority)


def exit_code_is_retryable(code: int, retryable_codes: frozenset[int] = frozenset({75})) -> bool:
    """Exit 75 (EX_TEMPFAIL) means try again; other non-zero codes are failures."""
    return code in retryable_codes


def exception_is_retryable(exc: BaseException) -> bool:
    """Timeouts and connection errors are retryable; other exceptions are not.

    A handler can decide for itself by raising :class:`agentqueue.Retryable` or
    :class:`agentqueue.Fatal`, which carry the answer in ``retryable``.
    """
    explicit = getattr(exc, "retryable", None)
    if isinstance(explicit, bool):
        return explicit
    return isinstance(exc, TimeoutError | ConnectionError)


def failure_is_retryable(retryable: bool, timed_out: bool) -> bool:
    """Whether a failed attempt may be retried: the executor said so, or the attempt ran out
    of time (a timeout says nothing against the task itself)."""
    return retryable or timed_out
