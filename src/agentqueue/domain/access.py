"""Who may do what through the HTTP API (R20): roles, the principal a token stands for, and the
policy each route declares.

Roles rank submitter < approver < operator < admin, each allowed what the one before it is;
``worker`` stands beside them (tool results, and later remote claims). Every token but an admin
token is bound to one tenant: it sees and touches that tenant's tasks only, and an operation
whose effect crosses tenants (pausing a task type, listing tokens) needs a token that covers
every tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from .errors import InvalidInput


class Role(StrEnum):
    """A token's role."""

    SUBMITTER = "submitter"
    APPROVER = "approver"
    OPERATOR = "operator"
    ADMIN = "admin"
    WORKER = "worker"


def in_scope(bound: str | None, asked: str | None) -> str | None:
    """The tenant a call acts in: ``bound`` (a queue's or a token's tenant), which ``asked``
    may only repeat, else ``asked`` (None: every tenant). InvalidInput naming ``tenant`` for
    another tenant."""
    if bound is not None and asked is not None and asked != bound:
        raise InvalidInput(f"must be {bound!r} here", "tenant")
    return bound or asked


RANKED: tuple[Role, ...] = (Role.SUBMITTER, Role.APPROVER, Role.OPERATOR, Role.ADMIN)
"""The roles that include the ones before them."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the token's name (the actor on every event it writes), its role,
    and its tenant (None: every tenant, an admin)."""

    name: str
    role: Role
    tenant: str | None

    @property
    def every_tenant(self) -> bool:
        """Whether the token covers every tenant."""
        return self.tenant is None


@dataclass(frozen=True)
class Policy:
    """What a route needs: at least ``least`` in the ranked roles, or one of ``also``; with
    ``every_tenant``, a token that covers every tenant as well. ``public`` routes take no token
    (health only)."""

    least: Role | None = None
    also: tuple[Role, ...] = ()
    every_tenant: bool = False
    public: bool = False
    signed: str | None = None
    """The header whose signature of the body authenticates the request (a webhook): no
    token is taken, so no token's role allows it; the route checks the signature itself."""

    def allows(self, who: Principal) -> bool:
        """Whether ``who`` may call the route."""
        if self.public:
            return True
        if self.signed is not None:
            return False
        if self.every_tenant and not who.every_tenant:
            return False
        if who.role in self.also:
            return True
        if self.least is None or who.role not in RANKED:
            return False
        return RANKED.index(who.role) >= RANKED.index(self.least)

    def to_json(self) -> dict[str, object]:
        """As recorded in the OpenAPI document (``x-agentqueue-policy``)."""
        return {
            "least": self.least.value if self.least else None,
            "also": [r.value for r in self.also],
            "every_tenant": self.every_tenant,
            "public": self.public,
            "signed": self.signed,
        }

    @staticmethod
    def from_json(value: dict[str, object]) -> Policy:
        """The policy :meth:`to_json` gave."""
        least = value.get("least")
        also = value.get("also") or []
        assert isinstance(also, list)
        return Policy(
            least=Role(str(least)) if least else None,
            also=tuple(Role(str(r)) for r in also),
            every_tenant=bool(value.get("every_tenant")),
            public=bool(value.get("public")),
            signed=str(value["signed"]) if value.get("signed") else None,
        )

    def describe(self) -> str:
        """In words, for errors and the route table."""
        if self.public:
            return "no token"
        if self.signed is not None:
            return f"a body signed in {self.signed} (no token)"
        names = [f"{self.least.value} or above"] if self.least else []
        names += [r.value for r in self.also]
        text = " or ".join(names)
        return f"{text}, covering every tenant" if self.every_tenant else text


PUBLIC = Policy(public=True)
ANY_TOKEN = Policy(Role.SUBMITTER, also=(Role.WORKER,))
SUBMITTER = Policy(Role.SUBMITTER)
APPROVER = Policy(Role.APPROVER)
OPERATOR = Policy(Role.OPERATOR)
TOOL_RESULTS = Policy(Role.OPERATOR, also=(Role.WORKER,))
EVERY_TENANT_OPERATOR = Policy(Role.OPERATOR, every_tenant=True)
ADMIN = Policy(Role.ADMIN)
GITHUB_WEBHOOK = Policy(signed="X-Hub-Signature-256")
"""GitHub deliveries: authenticated by the webhook secret's signature, never by a token."""


@dataclass(frozen=True)
class TokenRecord:
    """A stored API token: never its secret, only the secret's hash and lookup prefix."""

    id: UUID
    name: str
    prefix: str
    secret_hash: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def principal(self) -> Principal:
        """Who the token acts as."""
        return Principal(self.name, self.role, self.tenant)

    def status(self, now: datetime) -> str:
        """``active``, ``revoked`` or ``expired``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def to_json(self, now: datetime) -> dict[str, object]:
        """As shown by ``tokens list``: never the hash."""
        return {
            "id": str(self.id),
            "name": self.name,
            "prefix": self.prefix,
            "role": self.role.value,
            "tenant": self.tenant,
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "status": self.status(now),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenRecord:
        """The token :meth:`to_json` gave, as the API lists it: without the secret's hash
        (``secret_hash`` is empty), its status worked out again from its times."""

        def at(value: str | None) -> datetime | None:
            return None if value is None else datetime.fromisoformat(value)

        return cls(
            id=UUID(data["id"]),
            name=data["name"],
            prefix=data["prefix"],
            secret_hash="",
            role=Role(data["role"]),
            tenant=data.get("tenant"),
            created_at=datetime.fromisoformat(data["created_at"]),
            created_by=data["created_by"],
            expires_at=at(data.get("expires_at")),
            revoked_at=at(data.get("revoked_at")),
        )
