"""The HTTP API from Python: ``AsyncClient`` (asyncio) and ``Client`` (sync), with the method
names and signatures of :class:`~agentqueue.AsyncQueue` and :class:`~agentqueue.Queue` for
everything the API offers.

    import agentqueue
    with agentqueue.Client("http://127.0.0.1:8077", token) as aq:
        made = aq.submit(title="Fix the login bug", task_type="bugfix", priority="P1")
        task = aq.get(made.task.id, wait=60)  # answered when it ends, or after 60 s

They return the queue's own records (Task, SubmitResult, TaskPage, Event, LogRecord, Stats,
Schedule, TokenRecord, ...), decoded from the API's JSON, and raise the queue's own errors,
read from its problem details: 422 InvalidInput (naming each field), 404 NotFound, 403
Forbidden, 409 :class:`~agentqueue.domain.errors.Refused` (a TransitionRefused and a Conflict),
401 Unauthenticated, 429 RateLimited (with ``retry_after``), 413 InvalidInput naming ``body``,
503 StoreUnavailable (StoreMisconfigured when the server does not ask to be tried again), and
ServerUnreachable (a StoreUnavailable) when no answer came; anything else is an APIError.

The server acts as the token: its name is the actor of every change and its tenant bounds
every read and write. Methods that take ``actor`` accept it only so that a client can stand in
for a queue; it is never sent.

Every request is described once, by a builder that returns a :class:`Call` (method, path,
query, body, and how to read the answer). ``AsyncClient`` sends calls with an
``httpx.AsyncClient`` and ``Client`` with an ``httpx.Client``; each keeps its connections alive
in a pool, so close the client (or use it as a context manager) when done.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar
from urllib.parse import quote, urlsplit
from uuid import UUID

import httpx
from pydantic import BaseModel

from .domain.access import TokenRecord
from .domain.errors import (
    AgentQueueError,
    APIError,
    FieldProblem,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Refused,
    ServerUnreachable,
    StoreMisconfigured,
    StoreUnavailable,
    Unauthenticated,
)
from .domain.models import Event, LogRecord, Task
from .domain.schedule import Schedule
from .domain.states import TaskState
from .ids import parse_task_id
from .service.audit import VerifyReport
from .service.reads import AgentLoad, Stats, TaskPage
from .service.submit import SubmitResult
from .service.tokens import NewToken
from .spec import TaskSpec
from .store.base import PausedType

P = ParamSpec("P")
R = TypeVar("R")

URL_ENV = "AGENTQUEUE_API"
TOKEN_ENV = "AGENTQUEUE_TOKEN"
DEFAULT_TIMEOUT_SECS = 30.0
STREAM_READ_SECS = 60.0
"""The longest silence an event stream may keep before the client gives up on it (the server
sends a keep-alive every 15 s)."""
PROBLEM_FIELDS = ("detail", "title")


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
    def submit_many(specs: Iterable[TaskSpec | Mapping[str, Any]]) -> Call[list[SubmitResult]]:
        """Submit many tasks at once; results in input order. One bad item fails the call,
        naming ``tasks[i].field``, and nothing is written."""
        body = {"tasks": [_task_fields(s) for s in specs]}
        return Call(
            "POST",
            "/tasks/bulk",
            lambda data: _many(data["tasks"], SubmitResult.from_json),
            body=body,
        )

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
    def events(task_id: UUID | str) -> Call[list[Event]]:
        """The audit events of one task, oldest first."""
        return Call("GET", f"/tasks/{_tid(task_id)}/events", lambda d: _many(d, Event.from_json))

    @staticmethod
    def stream_events(task_id: UUID | str) -> Call[Event]:
        """Every event of the task so far, then each new one as it is written, until the
        task's terminal event (server-sent events); ``decode`` reads one event."""
        params = (("stream", "true"),)
        return Call("GET", f"/tasks/{_tid(task_id)}/events", Event.from_json, params)

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
    def verify() -> Call[VerifyReport]:
        """Check every task's audit chain; the report names the first bad event."""
        return Call("GET", "/verify", VerifyReport.from_json)

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
    ) -> Call[TaskPage]:
        """Tasks matching every given filter, newest first; ``next_cursor`` pages on. A list
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
        ):
            if value is not None:
                params.append((key, value))
        params.append(("limit", str(limit)))
        return Call("GET", "/tasks", TaskPage.from_json, tuple(params))


def _tenant(tenant: str | None) -> tuple[tuple[str, str], ...]:
    return () if tenant is None else (("tenant", tenant),)


# --- answers ------------------------------------------------------------------------------


def _problem(response: httpx.Response) -> tuple[str, list[FieldProblem], str | None]:
    """The detail, field problems and error id of a problem-details answer."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"HTTP {response.status_code} {response.reason_phrase}", [], None
    detail = next((str(body[k]) for k in PROBLEM_FIELDS if body.get(k)), "")
    problems = [
        FieldProblem(str(e.get("field", "")), str(e.get("message", "")))
        for e in body.get("errors") or ()
        if isinstance(e, dict)
    ]
    error_id = body.get("error_id")
    return (
        detail or f"HTTP {response.status_code}",
        problems,
        error_id if isinstance(error_id, str) else None,
    )


def error_for(response: httpx.Response) -> AgentQueueError:
    """The error the local queue would raise for what this failed answer says."""
    status = response.status_code
    detail, problems, error_id = _problem(response)
    if status == 422:
        return InvalidInput(problems or [FieldProblem("", detail)])
    if status == 413:
        return InvalidInput(detail, "body")
    if status == 401:
        return Unauthenticated(detail)
    if status == 403:
        return Forbidden(detail)
    if status == 404:
        return NotFound(detail)
    if status == 409:
        return Refused(detail)
    if status == 429:
        return RateLimited(_retry_after(response), detail)
    if status == 503:
        if "retry-after" in response.headers:
            return StoreUnavailable(detail)
        return StoreMisconfigured(detail)
    return APIError(status, detail, error_id)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def answer(call: Call[R], response: httpx.Response) -> R:
    """The result of ``call`` from its answer; the mapped error if it failed."""
    if not response.is_success:
        raise error_for(response)
    try:
        return call.decode(response.json())
    except (ValueError, KeyError, TypeError) as exc:
        raise APIError(
            response.status_code,
            f"{call.method} {call.path}: the answer is not what this client reads "
            f"({type(exc).__name__}: {exc}); is the server an agentqueue API of this version?",
        ) from None


class _SSE:
    """Server-sent events, fed line by line, as Events."""

    def __init__(self, decode: Callable[[Any], Event]) -> None:
        self.decode = decode
        self.data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if any."""
        if not line:
            if not self.data:
                return None
            text, self.data = "\n".join(self.data), []
            return self.decode(json.loads(text))
        name, _, value = line.partition(":")
        if name == "data":
            self.data.append(value.removeprefix(" "))
        return None  # comments (keep-alives), ids and event names carry nothing more


# --- the clients --------------------------------------------------------------------------


class _Base:
    """What both clients hold: where the API is, and the headers every request carries."""

    def __init__(self, url: str | None, token: str | None, timeout: float) -> None:
        self.url = _base_url(url or os.environ.get(URL_ENV))
        self.timeout = timeout
        self._headers = {
            "Authorization": f"Bearer {_checked_token(token or os.environ.get(TOKEN_ENV))}",
            "Accept": "application/json",
            "User-Agent": "agentqueue-client",
        }

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}({self.url!r})"

    def _build(
        self, http: httpx.Client | httpx.AsyncClient, call: Call[Any], *, stream: bool = False
    ) -> httpx.Request:
        headers = {"Accept": "text/event-stream"} if stream else {}
        content = None
        if call.body is not None:
            content = json.dumps(call.body, default=_jsonable, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        read = max(self.timeout, STREAM_READ_SECS) if stream else self.timeout + call.wait
        return http.build_request(
            call.method,
            call.path.lstrip("/"),
            params=list(call.params),
            content=content,
            headers=headers,
            timeout=httpx.Timeout(read, connect=self.timeout),
        )

    def _unreachable(self, exc: httpx.TransportError) -> ServerUnreachable:
        reason = str(exc) or type(exc).__name__
        return ServerUnreachable(f"cannot reach the agentqueue API at {self.url}: {reason}")


def _base_url(url: str | None) -> str:
    if not url:
        raise InvalidInput(f"name the API's URL (or set {URL_ENV})", "url")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput("must be an http:// or https:// URL of an agentqueue API", "url")
    if parts.query or parts.fragment:
        raise InvalidInput("must not have a query or fragment", "url")
    path = parts.path.rstrip("/").removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


def _checked_token(token: str | None) -> str:
    if token is None or not token.strip():
        raise InvalidInput(f"an API token is required (or set {TOKEN_ENV})", "token")
    token = token.strip()
    if not token.isascii() or not token.isprintable() or " " in token:
        # Never echo it: a token is a secret even when it is malformed.
        raise InvalidInput("must be one word of printable ASCII (it is not shown)", "token")
    return token


def _signed(
    method: Callable[..., Any], build: Callable[..., Any], owner: str, returns: str
) -> None:
    """Give ``method`` the name, docs and signature (with ``self``) of its builder."""
    method.__name__ = build.__name__
    method.__qualname__ = f"{owner}.{build.__name__}"
    method.__doc__ = build.__doc__
    signature = inspect.signature(build)
    first = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[first, *signature.parameters.values()], return_annotation=returns
    )


def _returns(build: Callable[..., Any]) -> str:
    shown = str(inspect.signature(build).return_annotation)
    return shown.removeprefix("Call[").removesuffix("]")


def _async(
    build: Callable[P, Call[R]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.send(build(*args, **kwargs))

    _signed(method, build, "AsyncClient", _returns(build))
    return method


def _sync(build: Callable[P, Call[R]]) -> Callable[Concatenate[Client, P], R]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.send(build(*args, **kwargs))

    _signed(method, build, "Client", _returns(build))
    return method


class AsyncClient(_Base):
    """The HTTP API for asyncio code, with AsyncQueue's method names.

    ``url`` is the server (``http://127.0.0.1:8077``; a trailing ``/v1`` is allowed), else
    ``AGENTQUEUE_API``; ``token`` a secret from ``agentqueue tokens create``, else
    ``AGENTQUEUE_TOKEN``. ``timeout`` bounds each request, in seconds (``get(..., wait=)``
    adds its wait). ``transport`` replaces httpx's (``httpx.ASGITransport(app)`` serves an
    app in this process). Use it as ``async with AsyncClient(...) as aq:`` or ``await
    aq.close()`` when done.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECS,
        limits: httpx.Limits | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.AsyncClient(
            base_url=f"{self.url}/v1/",
            headers=self._headers,
            limits=limits or httpx.Limits(),
            transport=transport,
            trust_env=False,
        )

    async def send(self, call: Call[R]) -> R:
        """Send one call and read its answer (every method does this)."""
        try:
            response = await self._http.send(self._build(self._http, call))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        return answer(call, response)

    async def stream_events(self, task_id: UUID | str) -> AsyncIterator[Event]:
        """The task's events as they are written: every one so far, then each new one, ending
        after the task's terminal event. Close it early with ``contextlib.aclosing``."""
        call = Calls.stream_events(task_id)
        try:
            response = await self._http.send(
                self._build(self._http, call, stream=True), stream=True
            )
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        try:
            if not response.is_success:
                await response.aread()
                raise error_for(response)
            events = _SSE(call.decode)
            async for line in response.aiter_lines():
                event = events.feed(line)
                if event is not None:
                    yield event
            last = events.feed("")
            if last is not None:
                yield last
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        finally:
            await response.aclose()

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    submit = _async(Calls.submit)
    submit_many = _async(Calls.submit_many)
    get = _async(Calls.get)
    events = _async(Calls.events)
    logs = _async(Calls.logs)
    dead_letters = _async(Calls.dead_letters)
    stats = _async(Calls.stats)
    agents = _async(Calls.agents)
    cancel = _async(Calls.cancel)
    review = _async(Calls.review)
    requeue = _async(Calls.requeue)
    archive = _async(Calls.archive)
    approve = _async(Calls.approve)
    reject = _async(Calls.reject)
    submit_tool_result = _async(Calls.submit_tool_result)
    pause = _async(Calls.pause)
    resume = _async(Calls.resume)
    paused = _async(Calls.paused)
    add_schedule = _async(Calls.add_schedule)
    schedules = _async(Calls.schedules)
    remove_schedule = _async(Calls.remove_schedule)
    create_token = _async(Calls.create_token)
    tokens = _async(Calls.tokens)
    revoke_token = _async(Calls.revoke_token)
    verify = _async(Calls.verify)
    list = _async(Calls.list)


class Client(_Base):
    """The HTTP API for plain (sync) code, with Queue's method names; the same constructor
    as :class:`AsyncClient` (``transport``: an ``httpx.BaseTransport``). It sends with an
    ``httpx.Client`` in the calling thread (no event loop). Use it as ``with Client(...) as
    aq:`` or call ``close()`` when done."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECS,
        limits: httpx.Limits | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.Client(
            base_url=f"{self.url}/v1/",
            headers=self._headers,
            limits=limits or httpx.Limits(),
            transport=transport,
            trust_env=False,
        )

    def send(self, call: Call[R]) -> R:
        """Send one call and read its answer (every method does this)."""
        try:
            response = self._http.send(self._build(self._http, call))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        return answer(call, response)

    def stream_events(self, task_id: UUID | str) -> Iterator[Event]:
        """The task's events as they are written: every one so far, then each new one, ending
        after the task's terminal event. Close it early with ``contextlib.closing``."""
        call = Calls.stream_events(task_id)
        try:
            response = self._http.send(self._build(self._http, call, stream=True), stream=True)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        try:
            if not response.is_success:
                response.read()
                raise error_for(response)
            events = _SSE(call.decode)
            for line in response.iter_lines():
                event = events.feed(line)
                if event is not None:
                    yield event
            last = events.feed("")
            if last is not None:
                yield last
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        finally:
            response.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    submit = _sync(Calls.submit)
    submit_many = _sync(Calls.submit_many)
    get = _sync(Calls.get)
    events = _sync(Calls.events)
    logs = _sync(Calls.logs)
    dead_letters = _sync(Calls.dead_letters)
    stats = _sync(Calls.stats)
    agents = _sync(Calls.agents)
    cancel = _sync(Calls.cancel)
    review = _sync(Calls.review)
    requeue = _sync(Calls.requeue)
    archive = _sync(Calls.archive)
    approve = _sync(Calls.approve)
    reject = _sync(Calls.reject)
    submit_tool_result = _sync(Calls.submit_tool_result)
    pause = _sync(Calls.pause)
    resume = _sync(Calls.resume)
    paused = _sync(Calls.paused)
    add_schedule = _sync(Calls.add_schedule)
    schedules = _sync(Calls.schedules)
    remove_schedule = _sync(Calls.remove_schedule)
    create_token = _sync(Calls.create_token)
    tokens = _sync(Calls.tokens)
    revoke_token = _sync(Calls.revoke_token)
    verify = _sync(Calls.verify)
    list = _sync(Calls.list)
