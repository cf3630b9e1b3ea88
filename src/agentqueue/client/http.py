"""``AsyncClient`` and ``Client``: thin senders of the calls built in :mod:`.calls`, one over
an ``httpx.AsyncClient`` and one over an ``httpx.Client``, each with a keep-alive pool."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, Self, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

import httpx

from ..domain.errors import InvalidInput, ServerUnreachable
from ..domain.models import Event
from .answers import EventStream, answer, error_for
from .calls import Call, Calls, encoded
from .names import TOKEN_ENV, URL_ENV

P = ParamSpec("P")

R = TypeVar("R")

DEFAULT_TIMEOUT_SECS = 30.0
STREAM_READ_SECS = 60.0
"""The longest silence an event stream may keep before the client gives up on it (the server
sends a keep-alive every 15 s)."""


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
            content = encoded(call.body)
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

    def _pool(self, limits: httpx.Limits | None) -> dict[str, Any]:
        """What the sync and the async httpx client are both made with."""
        return {
            "base_url": f"{self.url}/v1/",
            "headers": self._headers,
            "limits": limits or httpx.Limits(),
        }

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
        self._http = httpx.AsyncClient(transport=transport, **self._pool(limits))

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
            events = EventStream(call.decode)
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
    waiting = _async(Calls.waiting)
    events = _async(Calls.events)
    prompt = _async(Calls.prompt)
    thread = _async(Calls.thread)
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
    deliveries = _async(Calls.deliveries)
    delivery = _async(Calls.delivery)
    retry_delivery = _async(Calls.retry_delivery)
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
        self._http = httpx.Client(transport=transport, **self._pool(limits))

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
            events = EventStream(call.decode)
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
    waiting = _sync(Calls.waiting)
    events = _sync(Calls.events)
    prompt = _sync(Calls.prompt)
    thread = _sync(Calls.thread)
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
    deliveries = _sync(Calls.deliveries)
    delivery = _sync(Calls.delivery)
    retry_delivery = _sync(Calls.retry_delivery)
    remove_schedule = _sync(Calls.remove_schedule)
    create_token = _sync(Calls.create_token)
    tokens = _sync(Calls.tokens)
    revoke_token = _sync(Calls.revoke_token)
    verify = _sync(Calls.verify)
    list = _sync(Calls.list)
