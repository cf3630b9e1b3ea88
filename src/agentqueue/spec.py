"""What a caller may submit: TaskSpec, validated field by field (SPEC section 1 and section 5).

Every input path (Python API, CLI, later the HTTP API and intake) turns its input into TaskSpec
through :func:`parse_specs`, which either returns every spec valid or raises InvalidInput naming
each bad field; nothing is written before all specs are valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .domain.audit import canonical_json
from .domain.deliveries import callback_url_problem
from .domain.errors import FieldProblem, InvalidInput
from .domain.limits import json_problem, time_problem
from .domain.models import SOURCES
from .domain.priority import DEFAULT_PRIORITY, parse_priority
from .domain.retry import DEFAULT_MAX_RETRIES, P0_MAX_RETRIES
from .domain.values import NUL, NUL_PROBLEM
from .tracing import traceparent_problem

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_TENANT = "default"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")


def check_name(value: str, what: str) -> str:
    """``value`` if it is a valid name (of a task type, tenant, agent, ...); else ValueError
    (the NUL character is named as it is in every other field)."""
    if NUL in value:
        raise ValueError(NUL_PROBLEM)
    if not _NAME.match(value):
        raise ValueError(
            f"{what} must be 1-64 letters, digits or _.:@- starting with a letter or digit"
        )
    return value


class TaskSpec(BaseModel):
    """A task to submit, with the field names of SPEC section 1.

    Only ``title`` and ``task_type`` are required. Unknown fields are refused, so a typo never
    silently drops a setting.
    """

    # Its validator is built on first use: commands that submit nothing never build it.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: UUID | None = None
    """Chosen by the caller, so tasks of one batch can name each other in depends_on; the
    same id again (in the same tenant) is the same task."""
    title: str = Field(min_length=1, max_length=256)
    task_type: str
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: int = DEFAULT_PRIORITY
    tenant: str = DEFAULT_TENANT
    source: str = "api"
    source_id: str | None = Field(default=None, min_length=1, max_length=128)
    assignee: str | None = None
    """The agent that should do it; for mail, the recipient."""
    labels: tuple[str, ...] = ()
    """Capabilities the agent that runs it must declare (routing)."""
    kind: str | None = None
    """The pipeline it goes through (``task``, ``mail``, or a registered kind); by default the
    first kind that accepts it (mail for source ``mail``), else ``task``."""
    depends_on: tuple[UUID, ...] = ()
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=200, validate_default=True
    )
    callback_url: str | None = Field(default=None, max_length=512)
    timeout_secs: int | None = Field(default=None, ge=1, le=7 * 24 * 3600)
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0, le=100)
    run_after: datetime | None = None
    requested_by: str = Field(default="api", min_length=1, max_length=64)
    traceparent: str | None = None
    """The W3C trace context the task belongs to (default: the caller's current span, when
    the caller uses OpenTelemetry)."""
    in_reply_to: UUID | None = None
    """The mail this mail answers (a thread): it must exist in the same tenant, be of the same
    kind, and this reply must come from its recipient (``requested_by``)."""

    @field_validator("traceparent")
    @classmethod
    def _traceparent(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().lower()
        problem = traceparent_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("task_type")
    @classmethod
    def _task_type(cls, value: str) -> str:
        return check_name(value, "task_type")

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_name(value, "tenant")

    @field_validator("assignee")
    @classmethod
    def _assignee(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "assignee")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > 32:
            raise ValueError("lists more than 32 labels")
        for label in value:
            check_name(label, "a label")
        return tuple(dict.fromkeys(value))

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "kind")

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value not in SOURCES:
            raise ValueError(f"must be one of {', '.join(sorted(SOURCES))}")
        return value

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: object) -> int:
        try:
            return parse_priority(value)
        except InvalidInput as exc:
            raise ValueError(exc.problems[0].message) from None

    @field_validator("*")
    @classmethod
    def _storable(cls, value: Any, info: ValidationInfo) -> Any:
        problem = json_problem(value)
        if problem is not None:
            where, message = problem
            raise ValueError(f"{where}: {message}" if where else message)
        return value

    @field_validator("payload")
    @classmethod
    def _payload(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        limit = (info.context or {}).get("max_payload_bytes", DEFAULT_MAX_PAYLOAD_BYTES)
        try:
            size = len(canonical_json(value).encode())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be JSON: {exc}") from None
        if size > limit:
            raise ValueError(f"is {size} bytes, over the limit of {limit} bytes")
        return value

    @field_validator("depends_on")
    @classmethod
    def _depends_on(cls, value: tuple[UUID, ...]) -> tuple[UUID, ...]:
        if len(set(value)) != len(value):
            raise ValueError("lists a task twice")
        if len(value) > 1000:
            raise ValueError("lists more than 1000 tasks")
        return value

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError("must be an http:// or https:// URL")
        # Loopback, private and metadata addresses are refused here (SSRF); a host name is
        # checked again once resolved, when the callback is sent.
        problem = callback_url_problem(value, (info.context or {}).get("allow_private", False))
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("run_after")
    @classmethod
    def _run_after(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        problem = time_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    # The P0 rules are field validators, not a model validator, so each is reported on its own
    # field and alongside every other bad field (a model validator runs only when all fields
    # are valid, and stops at its first complaint). ``priority`` is validated before both.
    @field_validator("idempotency_key")
    @classmethod
    def _idempotency_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("priority") == 0 and not value:
            raise ValueError("required for P0 tasks, so an irreversible action is never done twice")
        return value

    @field_validator("max_retries")
    @classmethod
    def _max_retries(cls, value: int, info: ValidationInfo) -> int:
        if info.data.get("priority") == 0 and value > P0_MAX_RETRIES:
            raise ValueError(f"a P0 task allows at most {P0_MAX_RETRIES} automatic retries")
        return value


def parse_specs(
    items: Iterable[TaskSpec | Mapping[str, Any]],
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    defaults: Mapping[str, Any] | None = None,
    field_prefix: str = "tasks",
    single: bool = False,
    allow_private_callbacks: bool = False,
) -> list[TaskSpec]:
    """Validate every item; return them all or raise InvalidInput naming each bad field.

    ``defaults`` fill fields an item leaves out (the CLI's tenant or requested_by, say).
    ``single`` names fields plainly (``priority``) instead of ``tasks[0].priority``.
    ``allow_private_callbacks`` (``[callbacks] allow_private``) lets a callback_url name a
    loopback or private address.
    """
    context = {"max_payload_bytes": max_payload_bytes, "allow_private": allow_private_callbacks}
    specs: list[TaskSpec] = []
    problems: list[FieldProblem] = []
    for index, item in enumerate(items):
        prefix = "" if single else f"{field_prefix}[{index}]."
        if isinstance(item, TaskSpec):
            data: Any = item.model_dump(exclude_unset=True)
        elif isinstance(item, Mapping):
            data = dict(item)
        else:
            problems.append(FieldProblem(prefix.rstrip("."), "must be an object of task fields"))
            continue
        if defaults:
            data = {**{k: v for k, v in defaults.items() if v is not None}, **data}
        try:
            specs.append(TaskSpec.model_validate(data, context=context))
        except ValidationError as exc:
            problems.extend(_problems(exc, prefix))
    if problems:
        raise InvalidInput(problems)
    return specs


def field_problems(exc: ValidationError) -> list[FieldProblem]:
    """A pydantic validation error as field problems, in the words task fields use."""
    return _problems(exc, "")


def _problems(exc: ValidationError, prefix: str) -> list[FieldProblem]:
    found = []
    for err in exc.errors(include_url=False, include_input=False):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required"
        field, message = _split_field(path.lstrip("."), message)
        found.append(FieldProblem(prefix + field if field else prefix.rstrip("."), message))
    return found


def _split_field(path: str, message: str) -> tuple[str, str]:
    # Model-level rules name their field at the start of the message ("max_retries: ...").
    if not path and ": " in message:
        head, rest = message.split(": ", 1)
        if head.isidentifier():
            return head, rest
    return path, message
