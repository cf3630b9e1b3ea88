"""Pure ASGI middleware: the body size limit, and the last word on unexpected errors."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .problems import internal_error, problem


class BodyTooLarge(Exception):
    """A request body went past the limit while it was being read."""


class _Tracked:
    """A ``send`` that remembers whether the answer has begun (after which no other answer
    can be given)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class BodyLimit:
    """Refuse a body over ``max_bytes`` with 413: at once when Content-Length says so, else as
    soon as the bytes read pass it (a chunked body is never read whole first)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await problem(400, "Content-Length is not a number")(scope, receive, send)
                    return
                if declared > limit:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        tracked = _Tracked(send)

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not tracked.started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(
            413,
            f"the request body is over the limit of {self.max_bytes} bytes ([api] max_body_bytes)",
        )
        await response(scope, receive, send)


class LastResort:
    """Answer an error nothing else handled with a 500 problem carrying an error id (logged
    with its traceback), instead of a traceback or a dropped connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracked = _Tracked(send)
        try:
            await self.app(scope, receive, tracked)
        except BodyTooLarge:
            raise
        except Exception as exc:
            if tracked.started:
                raise
            where: Any = f"{scope.get('method')} {scope.get('path')}"
            await internal_error(exc, where)(scope, receive, send)
