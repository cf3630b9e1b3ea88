"""The requests of the HTTP client, described once for both clients: each builder of
:class:`Calls` takes the arguments of the client method of its name and returns the
:class:`Call` it sends (method, path, query, body, and how to read the answer). No I/O here."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar
from urllib.parse import quote
from uuid import UUID

from pydantic import BaseModel

from ..domain.access import TokenRecord
from ..domain.deliveries import DeliveryRecord
from ..domain.errors import InvalidInput
from ..domain.models import Event, LogRecord, Task
from ..domain.schedule import Schedule
from ..domain.states import TaskState
from ..domain.waiting import Reason
from ..ids import parse_task_id
from ..service.audit import VerifyReport
from ..service.reads import AgentLoad, Stats, TaskPage
from ..service.submit import SubmitResult
from ..service.tokens import NewToken
from ..spec import TaskSpec
from ..store.base import PausedType

R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request of the API, and how its answer becomes the result."""

    method: str
    path: str
    """Under ``/v1``, each segment already quoted."""
    decode: Callable[[Any], R]
    """From the answer's JSON to the result."""
    params: tuple[tuple[str, str], ...] = ()
    body: Any = None
    """The JSON body (None: no body)."""
    wait: float = 0.0
    """Seconds the server may hold the answer back (added to the read timeout)."""


def _seg(value: object) -> str:
    return quote(str(value), safe="")


def _tid(task_id: UUID | str) -> str:
    return str(parse_task_id(task_id))


def _jsonable(value: Any) -> Any:
    """What ``json`` cannot encode itself, as the API reads it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _task_fields(item: TaskSpec | Mapping[str, Any]) -> Any:
    if isinstance(item, TaskSpec):
        return item.model_dump(mode="json", exclude_unset=True)
    return dict(item) if isinstance(item, Mapping) else item


def _many(values: Any, each: Callable[[Any], R]) -> list[R]:
    if not isinstance(values, list):
        raise TypeError("expected a JSON array")
    return [each(v) for v in values]


def _names(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _states(value: TaskState | str | Iterable[TaskState | str] | None) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str | TaskState) else list(value)
    return [TaskState(i).value if isinstance(i, TaskState) else str(i) for i in items]


def _when(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


class Calls:
    """The requests of every client method, built once for both clients (no I/O here).

    Each builder takes the arguments of the client method of its name and returns the
    :class:`Call` that method sends.
    """

    # --- submitting -------------------------------------------------------------------------

    @staticmethod
    def submit(
        spec: TaskSpec | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Call[SubmitResult]:
        """Submit one task, from a TaskSpec, a dict, or keyword fields (SPEC section 1 names).

        Returns the new task with ``created=True``, or the live task with the same (tenant,
        source, source_id), or any with the same idempotency_key, with ``created=False``.
        ``requested_by`` is the token's name (another value is refused)."""
        if spec is not None and fields:
            raise InvalidInput("give a spec or keyword fields, not both", "spec")
        item = spec if spec is not None else fields
        return Call("POST", "/tasks", SubmitResult.from_json, body=_task_fields(item))

    @staticmethod
    def submit_many(
        specs: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> Call[list[SubmitResult]]:
        """Submit many tasks at once; results in input order. One bad item fails the call,
        naming ``tasks[i].field``, and nothing is written. ``progress`` is told how many were
        stored when the server's answer comes (one request: all at once), as ``progress(n)``
        adds up on AsyncQueue."""
        body = {"tasks": [_task_fields(s) for s in specs]}

        def decode(data: Any) -> list[SubmitResult]:
            results = _many(data["tasks"], SubmitResult.from_json)
            if progress is not None:
                progress(len(results))
            return results

        return Call("POST", "/tasks/bulk", decode, body=body)

    # --- reading ----------------------------------------------------------------------------

    @staticmethod
    def get(task_id: UUID | str, wait: float | None = None) -> Call[Task]:
        """One task; NotFound if there is none in the token's tenant. With ``wait`` (seconds),
        the answer comes when the task has ended or the wait is over, whichever is first (the
        server caps the wait at ``[api] max_wait_secs``)."""
        params: tuple[tuple[str, str], ...] = ()
        if wait is not None and wait > 0:
            params = (("wait", repr(float(wait))),)
        return Call(
            "GET", f"/tasks/{_tid(task_id)}", Task.from_json, params, wait=max(0.0, wait or 0.0)
        )

    @staticmethod
    def waiting(task_id: UUID | str) -> Call[tuple[Task, list[Reason]]]:
        """One task and why it waits (the ``waiting`` field of its answer)."""

        def decode(data: Any) -> tuple[Task, list[Reason]]:
            return Task.from_json(data), [Reason.from_json(r) for r in data.get("waiting") or ()]

        return Call("GET", f"/tasks/{_tid(task_id)}", decode)

    @staticmethod
    def events(task_id: UUID | str) -> Call[list[Event]]:
        """The audit events of one task, oldest first."""
        return Call("GET", f"/tasks/{_tid(task_id)}/events", lambda d: _many(d, Event.from_json))

    @staticmethod
    def thread(task_id: UUID | str) -> Call[list[Task]]:
        """The thread a task is in: its first task, then the replies."""
        return Call(
            "GET", f"/tasks/{_tid(task_id)}/thread", lambda d: _many(d["items"], Task.from_json)
        )

    @staticmethod
    def stream_events(task_id: UUID | str) -> Call[Event]:
        """Every event of the task so far, then each new one as it is written, until the
        task's terminal event (server-sent events); ``decode`` reads one event."""
        params = (("stream", "true"),)
        return Call("GET", f"/tasks/{_tid(task_id)}/events", Event.from_json, params)

    @staticmethod
    def prompt(task_id: UUID | str) -> Call[str | None]:
        """The prompt a command agent is given for the task, rendered by the server (None:
        no template applies to it)."""

        def decode(data: Any) -> str | None:
            text = data.get("prompt")
            return None if text is None else str(text)

        return Call("GET", f"/tasks/{_tid(task_id)}/prompt", decode)

    @staticmethod
    def logs(task_id: UUID | str) -> Call[list[LogRecord]]:
        """Captured output of a task's attempts (agent stdout/stderr, handler log lines)."""
        return Call("GET", f"/tasks/{_tid(task_id)}/logs", lambda d: _many(d, LogRecord.from_json))

    @staticmethod
    def dead_letters(*, limit: int = 50, cursor: str | None = None) -> Call[TaskPage]:
        """Tasks in dead_letter or manual_review, newest first."""
        params = [("limit", str(limit))] + ([("cursor", cursor)] if cursor is not None else [])
        return Call("GET", "/dlq", TaskPage.from_json, tuple(params))

    @staticmethod
    def stats() -> Call[Stats]:
        """Task counts by state (of the token's tenant; of every tenant for an admin)."""
        return Call("GET", "/stats", Stats.from_json)

    @staticmethod
    def agents() -> Call[list[AgentLoad]]:
        """The configured agents with their capabilities, caps and admitted work."""
        return Call("GET", "/agents", lambda d: _many(d, AgentLoad.from_json))

    # --- people's actions -------------------------------------------------------------------

    @staticmethod
    def _action(path: str, body: dict[str, Any]) -> Call[Task]:
        return Call("POST", path, Task.from_json, body=body)

    @staticmethod
    def cancel(task_id: UUID | str, *, actor: str | None = None, reason: str = "") -> Call[Task]:
        """Cancel a task that has not ended; an executing one loses its lease at once.
        ``actor`` is ignored: the token's name acts."""
        return Calls._action(f"/tasks/{_tid(task_id)}/cancel", {"reason": reason})

    @staticmethod
    def review(task_id: UUID | str, *, actor: str | None = None, reason: str = "") -> Call[Task]:
        """Take a dead letter into manual_review. ``actor`` is ignored: the token's name
        acts."""
        return Calls._action(f"/dlq/{_tid(task_id)}/review", {"reason": reason})

    @staticmethod
    def requeue(
        task_id: UUID | str,
        *,
        actor: str | None = None,
        reason: str = "",
        assignee: str | None = None,
    ) -> Call[Task]:
        """Put a dead letter (or a task in review) back in the queue with retry_count reset,
        to ``assignee`` if given. ``actor`` is ignored: the token's name acts."""
        body: dict[str, Any] = {"reason": reason}
        if assignee is not None:
            body["assignee"] = assignee
        return Calls._action(f"/dlq/{_tid(task_id)}/requeue", body)

    @staticmethod
    def archive(task_id: UUID | str, *, actor: str | None = None, reason: str = "") -> Call[Task]:
        """Discard a dead letter (or a task in review) for good. ``actor`` is ignored: the
        token's name acts."""
        return Calls._action(f"/dlq/{_tid(task_id)}/archive", {"reason": reason})

    @staticmethod
    def approve(task_id: UUID | str, *, actor: str | None = None, reason: str) -> Call[Task]:
        """Release a task a guardrail holds for approval (to pending); Forbidden unless the
        token may approve it. ``actor`` is ignored: the token's name acts."""
        return Calls._action(f"/tasks/{_tid(task_id)}/approve", {"reason": reason})

    @staticmethod
    def reject(task_id: UUID | str, *, actor: str | None = None, reason: str) -> Call[Task]:
        """Cancel a task a guardrail holds for approval; Forbidden unless the token may
        approve it. ``actor`` is ignored: the token's name acts."""
        return Calls._action(f"/tasks/{_tid(task_id)}/reject", {"reason": reason})

    @staticmethod
    def submit_tool_result(
        task_id: UUID | str, call_id: str, result: Any, *, actor: str | None = None
    ) -> Call[Task]:
        """Answer a waiting task's tool call; the task is queued again. Refused (409) for a
        call that is not awaited any more. ``actor`` is ignored: the token's name acts."""
        path = f"/tasks/{_tid(task_id)}/tool-results/{_seg(call_id)}"
        return Calls._action(path, {"result": result})

    # --- pausing ----------------------------------------------------------------------------

    @staticmethod
    def pause(task_type: str, *, actor: str | None = None, reason: str = "") -> Call[PausedType]:
        """Stop admitting and claiming tasks of ``task_type`` in every tenant (the token must
        cover every tenant). ``actor`` is ignored: the token's name acts."""
        return Call(
            "POST", f"/pause/{_seg(task_type)}", PausedType.from_json, body={"reason": reason}
        )

    @staticmethod
    def resume(task_type: str, *, actor: str | None = None) -> Call[bool]:
        """Undo :meth:`pause`; False if the type was not paused. ``actor`` is ignored: the
        token's name acts."""
        return Call("POST", f"/resume/{_seg(task_type)}", lambda d: bool(d["resumed"]))

    @staticmethod
    def paused() -> Call[list[PausedType]]:
        """Every paused task type."""
        return Call("GET", "/pause", lambda d: _many(d, PausedType.from_json))

    # --- cron schedules ---------------------------------------------------------------------

    @staticmethod
    def add_schedule(
        name: str,
        *,
        cron: str,
        task: TaskSpec | Mapping[str, Any],
        tz: str = "UTC",
        catch_up: str = "skip",
        tenant: str | None = None,
    ) -> Call[Schedule]:
        """Submit ``task`` at every slot of ``cron`` in time zone ``tz`` (see
        ``AsyncQueue.add_schedule``); InvalidInput names each bad field."""
        body = {
            "name": name,
            "cron": cron,
            "task": _task_fields(task),
            "tz": tz,
            "catch_up": catch_up,
        }
        return Call("POST", "/schedules", Schedule.from_json, _tenant(tenant), body=body)

    @staticmethod
    def schedules(*, tenant: str | None = None) -> Call[list[Schedule]]:
        """The cron schedules (of the token's tenant; an admin's: of ``tenant``, or all)."""
        return Call("GET", "/schedules", lambda d: _many(d, Schedule.from_json), _tenant(tenant))

    @staticmethod
    def remove_schedule(name: str, *, tenant: str | None = None) -> Call[Schedule]:
        """Remove a cron schedule and return it; NotFound if there is none by that name."""
        return Call("DELETE", f"/schedules/{_seg(name)}", Schedule.from_json, _tenant(tenant))

    # --- deliveries --------------------------------------------------------------------------

    @staticmethod
    def deliveries(
        *,
        kind: str | None = None,
        state: str | None = None,
        task_id: UUID | str | None = None,
        limit: int = 50,
    ) -> Call[list[DeliveryRecord]]:
        """Deliveries of the token's tenant, newest first (see ``AsyncQueue.deliveries``)."""
        params = [("kind", kind), ("state", state)]
        params.append(("task", None if task_id is None else _tid(task_id)))
        found = (*tuple((k, v) for k, v in params if v is not None), ("limit", str(limit)))
        return Call("GET", "/deliveries", lambda d: _many(d, DeliveryRecord.from_json), found)

    @staticmethod
    def delivery(delivery_id: int) -> Call[DeliveryRecord]:
        """One delivery with every try; NotFound if there is none."""
        return Call("GET", f"/deliveries/{int(delivery_id)}", DeliveryRecord.from_json)

    @staticmethod
    def retry_delivery(delivery_id: int) -> Call[DeliveryRecord]:
        """Make a pending or given-up delivery due now; Conflict if delivered or being sent."""
        return Call("POST", f"/deliveries/{int(delivery_id)}/retry", DeliveryRecord.from_json)

    # --- tokens and verify (admin) ----------------------------------------------------------

    @staticmethod
    def create_token(
        name: str, *, role: str, tenant: str | None = None, expires: str | None = None
    ) -> Call[NewToken]:
        """Make an API token (see ``AsyncQueue.create_token``); the secret is in the result
        and nowhere else. Refused (a Conflict) if the name is taken."""
        body = {"name": name, "role": role, "tenant": tenant, "expires": expires}
        return Call("POST", "/tokens", NewToken.from_json, body=body)

    @staticmethod
    def tokens() -> Call[list[TokenRecord]]:
        """Every API token (revoked and expired ones too), without secrets or hashes."""
        return Call("GET", "/tokens", lambda d: _many(d, TokenRecord.from_json))

    @staticmethod
    def revoke_token(name: str) -> Call[TokenRecord]:
        """Revoke the token called ``name``; NotFound if there is no live one."""
        return Call("POST", f"/tokens/{_seg(name)}/revoke", TokenRecord.from_json)

    @staticmethod
    def verify(*, progress: Callable[[int], None] | None = None) -> Call[VerifyReport]:
        """Check every task's audit chain; the report names the first bad event. ``progress``
        is told how many tasks were checked when the server's report comes (all at once)."""

        def decode(data: Any) -> VerifyReport:
            report = VerifyReport.from_json(data)
            if progress is not None:
                progress(report.tasks)
            return report

        return Call("GET", "/verify", decode)

    # Last, so that ``list`` in the annotations above still means the builtin.
    @staticmethod
    def list(
        *,
        state: TaskState | str | Iterable[TaskState | str] | None = None,
        task_type: str | Iterable[str] | None = None,
        source: str | Iterable[str] | None = None,
        tenant: str | None = None,
        source_id: str | None = None,
        assignee: str | None = None,
        label: str | Iterable[str] | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        after: UUID | str | None = None,
    ) -> Call[TaskPage]:
        """Tasks matching every given filter, newest first; ``next_cursor`` pages on (or
        ``after``: the last task id seen). A list
        of values matches any of them (``label``: the task carries every one)."""
        params = [("state", s) for s in _states(state)]
        params += [("task_type", t) for t in _names(task_type)]
        params += [("source", s) for s in _names(source)]
        params += [("label", s) for s in _names(label)]
        for key, value in (
            ("tenant", tenant),
            ("source_id", source_id),
            ("assignee", assignee),
            ("created_after", None if created_after is None else _when(created_after)),
            ("created_before", None if created_before is None else _when(created_before)),
            ("cursor", cursor),
            ("after", None if after is None else str(after)),
        ):
            if value is not None:
                params.append((key, value))
        params.append(("limit", str(limit)))
        return Call("GET", "/tasks", TaskPage.from_json, tuple(params))


def _tenant(tenant: str | None) -> tuple[tuple[str, str], ...]:
    return () if tenant is None else (("tenant", tenant),)


def encoded(body: Any) -> bytes:
    """A call's body as the JSON the API reads (times ISO 8601, ids and enums as text)."""
    return json.dumps(body, default=_jsonable, separators=(",", ":")).encode()
