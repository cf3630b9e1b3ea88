"""Who is calling, and may they: bearer tokens, each route's declared policy, per-token rates.

Every route under ``/v1`` declares its policy where it is defined (:func:`guarded`); the app
refuses to start with a route that declares none, and the authorization tests walk the same
table. A checked token is trusted for ``[api] token_cache_secs`` in this process (so a revoked
token stops working everywhere within that time); its expiry is checked on every request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute

from ..domain.access import Policy, Principal, TokenRecord
from ..domain.errors import Forbidden, RateLimited, Unauthenticated
from ..domain.values import storable_text
from ..service import tokens
from ..service.runtime import Runtime

POLICY_KEY = "x-agentqueue-policy"
"""Where a route's policy is recorded in its OpenAPI extras (and so in the route table)."""


class NotAllowed(Forbidden):
    """The token's role (or tenant scope) does not allow the route."""


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class RateLimiter:
    """A token bucket per token name: ``per_minute`` refilled, ``burst`` at most (0: none)."""

    per_minute: float
    burst: int
    buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take(self, name: str) -> None:
        """Take one request from ``name``'s bucket; RateLimited if it is empty."""
        if self.per_minute <= 0:
            return
        now = time.monotonic()
        bucket = self.buckets.get(name)
        if bucket is None:
            bucket = self.buckets[name] = _Bucket(float(self.burst), now)
        rate = self.per_minute / 60.0
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            raise RateLimited(max(0.1, (1.0 - bucket.tokens) / rate))
        bucket.tokens -= 1.0


@dataclass
class Authenticator:
    """Checks bearer tokens against the store, remembering good ones for ``ttl_secs``."""

    rt: Runtime
    ttl_secs: float
    cache: dict[str, tuple[float, TokenRecord]] = field(default_factory=dict)

    async def principal(self, secret: str) -> Principal:
        """Who ``secret`` stands for; Unauthenticated if nobody (now)."""
        prefix = tokens.secret_prefix(secret)
        now = time.monotonic()
        cached = self.cache.get(secret)
        if cached is not None and now - cached[0] < self.ttl_secs:
            return tokens.check_secret(cached[1], secret, self.rt.clock.now())
        record = await self.rt.store.token_by_prefix(prefix)
        principal = tokens.check_secret(record, secret, self.rt.clock.now())
        assert record is not None
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[secret] = (now, record)
        return principal

    def forget(self, prefix: str) -> None:
        """Stop trusting the cached token with this prefix (it was revoked here)."""
        for secret, (_at, record) in list(self.cache.items()):
            if record.prefix == prefix:
                del self.cache[secret]


def bearer(request: Request) -> str:
    """The token of ``Authorization: Bearer ...``; Unauthenticated when there is none."""
    header = request.headers.get("authorization")
    if not header:
        raise Unauthenticated("a token is required: send Authorization: Bearer <token>")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthenticated("send the token as Authorization: Bearer <token>")
    return value.strip()


def needs(policy: Policy) -> Callable[[Request], Awaitable[Principal]]:
    """The dependency that authenticates a request and checks ``policy``."""

    async def caller(request: Request) -> Principal:
        state = request.app.state
        who: Principal = await state.auth.principal(bearer(request))
        state.limiter.take(who.name)
        if not policy.allows(who):
            raise NotAllowed(
                f"token {who.name!r} ({who.role.value}"
                f"{'' if who.tenant is None else ', tenant ' + repr(who.tenant)}) cannot do this;"
                f" it takes {policy.describe()}"
            )
        request.state.principal = who
        return who

    return caller


def storable_parameters(request: Request) -> None:
    """Refuse a path or query parameter holding a NUL character, naming it: no stored string
    holds one, and PostgreSQL refuses it even in a filter. Checked after the token (nothing
    answers a caller without one but 401)."""
    params = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in params:
        if isinstance(value, str):
            storable_text(value, name)


def guarded(policy: Policy) -> dict[str, Any]:
    """Keyword arguments for a route decorator that declare and enforce ``policy`` (and refuse
    parameters that cannot be stored)."""
    extra = {POLICY_KEY: policy.to_json()}
    if policy.public or policy.signed is not None:
        return {"openapi_extra": extra}
    checks = [Depends(needs(policy)), Depends(storable_parameters)]
    return {"openapi_extra": extra, "dependencies": checks}


def route_policy(route: APIRoute) -> Policy | None:
    """The policy a route declared, if any."""
    extra = route.openapi_extra or {}
    found = extra.get(POLICY_KEY)
    return Policy.from_json(found) if isinstance(found, dict) else None


async def principal(request: Request) -> Principal:
    """The caller the route's policy let in (a dependency for handlers). A coroutine, so
    FastAPI calls it in the event loop: a plain function would be sent to a worker thread and
    back on every request."""
    who: Principal | None = getattr(request.state, "principal", None)
    assert who is not None, "route declared no policy"
    return who


def retry_after(exc: RateLimited) -> str:
    """Whole seconds for the Retry-After header."""
    return str(max(1, math.ceil(exc.retry_after)))
