"""The Prometheus metrics of the queue (R19): names, HELP texts, labels and histogram buckets.

Pure: the store reads the figures, ``service/metrics.py`` turns them into the exposition. What
each counter counts is stated here once, in its HELP text, and the README repeats it.
"""

from __future__ import annotations

from .states import TaskState

BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Histogram bucket bounds in seconds (agent work runs from milliseconds to an hour). The
database keeps the same list (table ``aq_metric_buckets``): a test holds the two equal."""

LIVE_STATES: tuple[TaskState, ...] = (
    TaskState.PENDING,
    TaskState.BLOCKED,
    TaskState.QUEUED,
    TaskState.EXECUTING,
    TaskState.WAITING_TOOL,
    TaskState.RETRYING,
    TaskState.DEAD_LETTER,
    TaskState.MANUAL_REVIEW,
)
"""The states ``agent_queue_depth`` reports: every state a task can still leave."""

ENDINGS: tuple[str, ...] = ("completed", "failed", "timeout", "dead_letter", "cancelled")
"""The ``status`` values of ``agent_tasks_total``."""

LAPSE_REASONS: tuple[str, ...] = ("timeout", "heartbeat")
"""The ``reason`` values of ``agent_lease_lapses_total``."""

DEPTH = "agent_queue_depth"
LATENCY = "agent_queue_latency_seconds"
COMPLETION = "agent_queue_completion_time_seconds"
TASKS = "agent_tasks_total"
RETRIES = "agent_retries_total"
LEASE_LAPSES = "agent_lease_lapses_total"
OLDEST_QUEUED = "agent_queue_oldest_queued_age_seconds"
OUTBOX_BACKLOG = "agent_outbox_backlog"
LEADER_TERM = "agent_scheduler_leader_term"
TOOL_CALLS_WAITING = "agent_tool_calls_waiting"
WORKER_SLOTS = "agent_worker_slots"
WORKER_HEARTBEAT = "agent_worker_heartbeat_age_seconds"

HELP: dict[str, str] = {
    DEPTH: "Tasks in each live state now (the seed's status 'dead' is 'dead_letter' here).",
    LATENCY: "Seconds from a task's creation to its first start (observed once per task, "
    "at its first claim).",
    COMPLETION: "Seconds from a task's last start to its ending (observed once per ending of "
    "a task that had started: completed, failed, timeout, dead_letter, cancelled).",
    TASKS: "Task endings by how they ended, each counted once when the task enters it: "
    "completed, failed (non-retryable error), timeout (dead-lettered after its last attempt "
    "ran out of time), dead_letter (retries exhausted otherwise; the seed's 'dead'), "
    "cancelled. A task requeued from dead_letter and ending again counts again.",
    RETRIES: "Automatic retries: one per event that scheduled a retry (an attempt's retryable "
    "failure or timeout, a lapsed lease or a tool timeout with retries left).",
    LEASE_LAPSES: "Leases the scheduler took back from executors, by reason: timeout (the "
    "attempt's deadline passed) or heartbeat (its executor stopped heartbeating).",
    OLDEST_QUEUED: "Seconds the longest-waiting queued task has been eligible to run "
    "(0 when none is queued).",
    OUTBOX_BACKLOG: "Deliveries (callbacks, GitHub replies, alerts) not yet delivered nor "
    "given up, by kind.",
    LEADER_TERM: "The scheduler leader's term (it grows on every change of leader; "
    "0 when no scheduler ever led).",
    TOOL_CALLS_WAITING: "Tasks waiting on an external tool call (state waiting_tool).",
    WORKER_SLOTS: "Each worker's executor slots, busy or free, as of its last heartbeat.",
    WORKER_HEARTBEAT: "Seconds since each worker's last heartbeat.",
}
"""What every metric means."""


def bucket_bound(index: int) -> float:
    """The upper bound of histogram bucket ``index`` as the database numbers them (the count of
    bounds below the value): one past the last bound is +Inf."""
    return BUCKETS[index] if index < len(BUCKETS) else float("inf")
