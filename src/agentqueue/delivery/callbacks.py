"""Callbacks (R17): a task's end POSTed to its callback_url, signed the Standard Webhooks way.

Headers ``webhook-id`` (the same on every try of one delivery), ``webhook-timestamp`` and
``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, made by ``standardwebhooks``) with the secret
(``whsec_...``) in the environment variable ``[callbacks] secret_env``: read when sending, never
stored, never logged. Without it, callbacks wait in the outbox.

Before each try the host is resolved, and unless ``[callbacks] allow_private``, a host with any
address that is not public (loopback, private, link-local, metadata, ...) is not sent to: the
delivery is given up at once, its error recorded (a retry would meet the same answer; an operator
may ``deliveries retry`` it). The request then goes to the address that was checked (the URL
carries it, with the ``Host`` header and, for https, the TLS server name of the URL's host), so
a second DNS answer cannot slip another address in.

A 2xx answer is delivered; anything else is tried again with exponential backoff and jitter until
``[callbacks] horizon_hours`` after the task ended, then given up.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from standardwebhooks.webhooks import Webhook

from ..config import DeliverySettings
from ..domain.alerts import redact
from ..domain.deliveries import CALLBACK_KIND, backoff_secs, resolved_problem
from ..service.runtime import Runtime
from ..store.base import OutboxRow
from .outbox import Try

if TYPE_CHECKING:  # imported where a delivery is sent: a worker starts without it
    import httpx

log = logging.getLogger("agentqueue.deliveries")

USER_AGENT = "agentqueue-callbacks"

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Host and port to the addresses a connection may go to."""


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (by the system's resolver)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def webhook_id(row: OutboxRow) -> str:
    """The ``webhook-id`` of a delivery: the same on every try (receivers dedup by it)."""
    return f"msg_{row.task_id.hex}_{row.event_seq}"


def pinned(url: str, address: str) -> tuple[str, str]:
    """``url`` with its host replaced by ``address``, and the ``Host`` header it had."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        header = f"{header}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), header


class CallbackChannel:
    """Callbacks to each task's callback_url."""

    kind = CALLBACK_KIND

    def __init__(self, rt: Runtime, resolver: Resolver = resolve) -> None:
        self.rt = rt
        self.resolver = resolver

    @property
    def timeout_secs(self) -> float:
        """``[callbacks] timeout_secs``."""
        return self.rt.settings.callbacks.timeout_secs

    def _secret(self) -> Webhook | None:
        name = self.rt.settings.callbacks.secret_env
        value = os.environ.get(name) if name else None
        if not value:
            return None
        try:
            return Webhook(value)
        except Exception:  # a value that is not a whsec_ secret; never repeated anywhere
            return None

    def ready(self) -> bool:
        """The secret is configured (and is a secret ``standardwebhooks`` takes)."""
        return self._secret() is not None

    def not_ready_warning(self) -> str:
        """Callbacks wait: no secret."""
        name = self.rt.settings.callbacks.secret_env
        if name is None:
            return "callbacks wait in the outbox: no [callbacks] secret_env is configured"
        return (
            f"callbacks wait in the outbox: the environment variable {name} "
            "([callbacks] secret_env) holds no whsec_ secret"
        )

    async def send(self, http: httpx.AsyncClient, row: OutboxRow) -> Try:
        """Resolve, check, sign and POST."""
        webhook = self._secret()
        if webhook is None:
            return Try(False, error="no callback secret configured")
        url = row.url or ""
        parts = urlsplit(url)
        host = parts.hostname
        if parts.scheme.lower() not in ("http", "https") or not host:
            return Try(False, error="callback_url is not an http(s) URL", give_up=True)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        try:
            addresses = await self.resolver(host, port)
        except OSError as exc:
            return Try(False, error=f"cannot resolve the callback host: {exc}")
        problem = resolved_problem(addresses, self.rt.settings.callbacks.allow_private)
        if problem is not None:
            return Try(False, error=problem, give_up=True)
        target, host_header = pinned(url, addresses[0])
        body = json.dumps(row.body, separators=(",", ":"), ensure_ascii=False)
        msg_id = webhook_id(row)
        now = self.rt.clock.now()
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "host": host_header,
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": webhook.sign(msg_id, now, body),
        }
        extensions = {"sni_hostname": host} if parts.scheme.lower() == "https" else {}
        import httpx

        auth: httpx.Auth | None = None
        if parts.username is not None:  # user info cannot stay in a URL naming the address
            auth = httpx.BasicAuth(parts.username, parts.password or "")
        try:
            response = await http.post(
                target,
                content=body.encode(),
                headers=headers,
                timeout=self.timeout_secs,
                extensions=extensions,
                auth=auth or httpx.USE_CLIENT_DEFAULT,
            )
        except Exception as exc:  # recorded (masked) and tried again later
            return Try(False, error=redact(f"{type(exc).__name__}: {exc}".rstrip(": ")))
        if 200 <= response.status_code < 300:
            return Try(True, response.status_code)
        return Try(False, response.status_code, f"HTTP {response.status_code}")

    def next_try(self, row: OutboxRow, tried: Try, now: datetime) -> datetime | None:
        """Exponential backoff with jitter, until the horizon."""
        return next_within_horizon(self.rt.settings.callbacks, row, tried, now)


def next_within_horizon(
    settings: DeliverySettings, row: OutboxRow, tried: Try, now: datetime
) -> datetime | None:
    """The next try after backoff (or when the receiver asked, if later), or None once that is
    past ``horizon_hours`` after the delivery was stored."""
    delay = backoff_secs(
        row.attempts + 1, settings.backoff_first_secs, settings.backoff_max_secs, random.random()
    )
    at = now + timedelta(seconds=delay)
    if tried.retry_at is not None and tried.retry_at > at:
        at = tried.retry_at
    if at > row.created_at + timedelta(hours=settings.horizon_hours):
        return None
    return at
