"""API tokens (R20): made with a secret shown once, kept as a hash, checked on every request.

A secret reads ``aq_<prefix>_<key>``: the prefix (12 characters) finds the stored token in one
indexed read, and the key carries 256 random bits, so a single SHA-256 of the whole secret is a
safe hash (guessing is hopeless; there is no password to stretch). Secrets appear nowhere but
in the one answer that creates them: not in the database, logs, errors or listings.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..domain.access import Principal, Role, TokenRecord
from ..domain.errors import Conflict, InvalidInput, NotFound, Unauthenticated
from ..ids import new_task_id
from ..spec import check_name
from .runtime import Runtime

SECRET_PREFIX = "aq_"
PREFIX_CHARS = 12
_SECRET = re.compile(r"^aq_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$")
_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNITS = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


@dataclass(frozen=True)
class NewToken:
    """A token just made and its secret, which is shown this once."""

    record: TokenRecord
    secret: str

    def to_json(self, now: datetime) -> dict[str, object]:
        """The token as listed, with its ``secret``."""
        return {**self.record.to_json(now), "secret": self.secret}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NewToken:
        """The new token :meth:`to_json` gave (as the API answers its creation)."""
        return cls(TokenRecord.from_json(data), data["secret"])


def hash_secret(secret: str) -> str:
    """The stored form of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_expiry(value: str | None, now: datetime) -> datetime | None:
    """``90d``, ``12h``, ``30m``, ``2w`` from ``now``; ``never`` or None: no expiry."""
    if value is None or value == "never":
        return None
    match = _DURATION.match(value.strip())
    if not match or int(match.group(1)) == 0:
        raise InvalidInput("must be a duration like 30m, 12h, 90d or 2w, or never", "expires")
    try:
        return now + timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:
        raise InvalidInput("is past the year 9999", "expires") from None


def _role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise InvalidInput(f"unknown role {value!r}; one of {known}", "role") from None


async def create_token(
    rt: Runtime,
    *,
    name: str,
    role: str,
    tenant: str | None = None,
    expires: str | None = None,
    actor: str,
) -> NewToken:
    """Make a token called ``name`` (the actor on everything it does). A token of any role but
    admin is bound to ``tenant`` (the default tenant if None); an admin token covers every
    tenant and takes none. Raises InvalidInput naming the field, Conflict if the name is
    taken."""
    try:
        check_name(name, "name")
    except ValueError as exc:
        raise InvalidInput(str(exc), "name") from None
    kind = _role(role)
    if kind is Role.ADMIN:
        if tenant is not None:
            raise InvalidInput("an admin token covers every tenant and takes none", "tenant")
    else:
        tenant = tenant or rt.settings.queue.default_tenant
        try:
            check_name(tenant, "tenant")
        except ValueError as exc:
            raise InvalidInput(str(exc), "tenant") from None
    now = rt.clock.now()
    expires_at = parse_expiry(expires, now)
    prefix = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))
    secret = f"{SECRET_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    record = TokenRecord(
        id=new_task_id(),
        name=name,
        prefix=prefix,
        secret_hash=hash_secret(secret),
        role=kind,
        tenant=tenant,
        created_at=now,
        created_by=actor,
        expires_at=expires_at,
    )
    if not await rt.store.insert_token(record):
        raise Conflict(f"a token called {name!r} exists (revoke it, or choose another name)")
    return NewToken(record, secret)


async def list_tokens(rt: Runtime) -> list[TokenRecord]:
    """Every token, by name (revoked and expired ones too)."""
    return await rt.store.list_tokens()


async def revoke_token(rt: Runtime, name: str) -> TokenRecord:
    """Revoke the token called ``name``; NotFound if there is no live token by that name."""
    revoked = await rt.store.revoke_token(name, rt.clock.now())
    if revoked is None:
        raise NotFound(f"no live token called {name!r}")
    return revoked


def secret_prefix(secret: str) -> str:
    """The lookup prefix of a well-formed secret; Unauthenticated otherwise."""
    match = _SECRET.match(secret)
    if not match:
        raise Unauthenticated("the token is not an agentqueue token")
    return match.group(1)


def check_secret(record: TokenRecord | None, secret: str, now: datetime) -> Principal:
    """Who ``secret`` stands for, given the record its prefix found; Unauthenticated for an
    unknown, revoked or expired token."""
    if record is None or not hmac.compare_digest(record.secret_hash, hash_secret(secret)):
        raise Unauthenticated("unknown token")
    if record.revoked_at is not None:
        raise Unauthenticated("the token was revoked")
    if record.expires_at is not None and record.expires_at <= now:
        raise Unauthenticated("the token has expired")
    return record.principal()


async def authenticate(rt: Runtime, secret: str) -> Principal:
    """Who ``secret`` stands for (one indexed read); Unauthenticated if nobody."""
    prefix = secret_prefix(secret)
    return check_secret(await rt.store.token_by_prefix(prefix), secret, rt.clock.now())
