"""The shapes of the API's answers and request bodies, for the OpenAPI document.

Answers are built by the domain records' own ``to_json`` (the same JSON the CLI prints with
``--json``); these models describe them, and the schema tests hold every answer to them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..spec import TaskSpec


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskOut(_Out):
    """A task (SPEC section 1 field names)."""

    id: str
    tenant: str
    source: str
    source_id: str | None
    title: str
    task_type: str
    payload: Any
    priority: int
    state: str
    state_reason: str | None
    hold: str | None
    max_retries: int
    retry_count: int
    timeout_secs: int
    lock_token: str | None
    locked_at: str | None
    heartbeat_at: str | None
    kind: str
    labels: list[str]
    assignee: str | None
    agent: str | None
    assigned_to: str | None
    depends_on: list[str]
    idempotency_key: str | None
    callback_url: str | None
    checkpoint: Any
    tool_calls: list[Any]
    result: Any
    error: str | None
    requested_by: str
    approved_by: str | None
    run_after: str | None
    created_at: str | None
    updated_at: str | None
    started_at: str | None
    finished_at: str | None
    traceparent: str | None = None
    in_reply_to: str | None = None


class WaitingOut(_Out):
    """One reason a task waits: ``code`` (stable: paused, approval, dependencies,
    dependency_failed, dependency_stuck, backoff, scheduled, no_agent, agent_cap, global_cap,
    admission, claim, tool, executing, blocked), ``text`` for people, and ``moves``: whether the
    task goes on without anyone acting."""

    code: str
    text: str
    moves: bool


class TaskDetailOut(TaskOut):
    """A task, and (unless it has ended) why it waits."""

    waiting: list[WaitingOut] | None = None


class SubmitOut(TaskOut):
    """A submitted task: ``created`` false when an existing task matched (``matched_by``
    says how: ``idempotency_key``, ``source`` or ``id``)."""

    created: bool
    matched_by: str | None = None


class BulkIn(BaseModel):
    """Tasks to submit together: all are valid and stored, or none is."""

    tasks: list[TaskSpec] = Field(min_length=1)


class BulkOut(_Out):
    """One result per task, in order (more for a task its pipeline broadcasts)."""

    tasks: list[SubmitOut]


class TaskPageOut(_Out):
    """A page of tasks, newest first; ``next`` is the cursor of the next page."""

    items: list[TaskOut]
    next: str | None


class ThreadOut(_Out):
    """A thread: its first task, then the replies (``in_reply_to``), oldest first."""

    items: list[TaskOut]


class EventOut(_Out):
    """One audited change of a task."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    task_id: str
    tenant: str
    seq: int
    at: str | None
    from_: str | None = Field(alias="from")
    to: str
    action: str
    actor: str
    reason: str
    data: dict[str, Any]
    hash: str


class LogOut(_Out):
    """Output captured from one attempt."""

    task_id: str
    tenant: str
    attempt: int
    stream: str
    at: str | None
    text: str
    truncated: bool


class PromptOut(_Out):
    """The prompt a command agent is given for a task."""

    task_id: str
    prompt: str | None
    """None when no ``[prompts]`` template applies to the task."""


class StatsOut(_Out):
    """Task counts by state."""

    by_state: dict[str, int]
    total: int


class AgentOut(_Out):
    """A configured agent and its admitted work against its cap."""

    name: str
    task_types: list[str]
    labels: list[str]
    max_concurrent: int
    admitted: int


class PausedOut(_Out):
    """A paused task type."""

    task_type: str
    paused_at: str
    paused_by: str
    reason: str


class DeliveryTryOut(_Out):
    """One try of a delivery."""

    at: str
    status_code: int | None
    duration_ms: float
    error: str | None


class DeliveryOut(_Out):
    """A delivery from the outbox (``kind`` callback, github_reply or alert); ``tries``: every
    try, oldest first (empty in lists). ``url`` is shown without what may carry a secret."""

    id: int
    kind: str
    state: str
    task_id: str
    tenant: str
    event_seq: int
    url: str | None
    body: Any
    attempts: int
    next_attempt_at: str
    delivered_at: str | None
    given_up_at: str | None
    last_error: str | None
    last_status: int | None
    created_at: str
    leased: bool
    tries: list[DeliveryTryOut]


class ResumedOut(_Out):
    """Whether the type had been paused."""

    task_type: str
    resumed: bool


class ScheduleIn(BaseModel):
    """A cron schedule to add."""

    model_config = ConfigDict(extra="forbid")

    name: str
    cron: str
    task: dict[str, Any]
    tz: str = "UTC"
    catch_up: str = "skip"


class ScheduleOut(_Out):
    """A cron schedule (times in UTC)."""

    tenant: str
    name: str
    cron: str
    tz: str
    catch_up: str
    task: dict[str, Any]
    next_at: str | None
    last_slot_at: str | None
    last_fired_at: str | None
    created_by: str
    created_at: str | None
    updated_at: str | None


class TokenIn(BaseModel):
    """A token to make."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    tenant: str | None = None
    expires: str | None = Field(default=None, description="30m, 12h, 90d, 2w or never")


class TokenOut(_Out):
    """A token as listed: never its secret or hash."""

    id: str
    name: str
    prefix: str
    role: str
    tenant: str | None
    created_at: str
    created_by: str
    expires_at: str | None
    revoked_at: str | None
    status: str


class NewTokenOut(TokenOut):
    """A new token with its secret, shown this once."""

    secret: str


class ActionIn(BaseModel):
    """Why a person acts (recorded in the audit log)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = ""


class RequeueIn(ActionIn):
    """Requeue a dead letter, optionally to another assignee."""

    assignee: str | None = None


class DecisionIn(BaseModel):
    """An approval or rejection, which must say why."""

    model_config = ConfigDict(extra="forbid")

    reason: str


class ToolResultIn(BaseModel):
    """The result of a tool call the task waits on (any JSON value)."""

    model_config = ConfigDict(extra="forbid")

    result: Any = None


class PauseIn(BaseModel):
    """Why a type is paused."""

    model_config = ConfigDict(extra="forbid")

    reason: str = ""


class VerifyOut(_Out):
    """What verify checked; ``breaks`` names each chain that does not hold."""

    ok: bool
    tasks: int
    events: int
    purged: int
    breaks: list[str]
    problems: list[str]
    """What does not hold beyond single chains: the global sequence, the anchors, the anchor
    file, the append-only triggers (each in words)."""


class HealthOut(_Out):
    """Liveness or readiness."""

    status: str
    detail: str | None = None


class ProblemOut(BaseModel):
    """RFC 9457 problem details; ``errors`` names each bad field."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None
    error_id: str | None = None
