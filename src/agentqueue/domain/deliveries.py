"""Deliveries a change calls for (R8 alerts, R17 callbacks, replies on a GitHub issue), what
they say, how they back off, and which addresses a callback may never reach.

One place decides whether a task's end must be delivered anywhere (:func:`needs_delivery`, which
the hot completion path asks before it writes set-wise) and what each delivery carries
(:func:`deliveries_for`): a change written twice can never raise a delivery twice, since each is
keyed by (kind, task, audit position).

Pure: no I/O, no clock reads (address checks take already resolved addresses).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from .alerts import dead_letter_alert, redact
from .delivery_kinds import ALERT_KIND
from .delivery_kinds import CALLBACK_KIND as CALLBACK_KIND  # the names stay importable from here
from .delivery_kinds import DELIVERY_STATES as DELIVERY_STATES
from .delivery_kinds import GITHUB_REPLY_KIND as GITHUB_REPLY_KIND
from .delivery_kinds import KINDS as KINDS
from .models import Event, Task
from .states import TaskState

ENDS = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.DEAD_LETTER, TaskState.CANCELLED}
)
"""The states a task ends in, as far as deliveries go (dead_letter: entering it)."""

GITHUB_SOURCES = frozenset({"issue", "pr"})
_GITHUB_ID = re.compile(
    r"(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/(?P<repo>[A-Za-z0-9._-]{1,100})#(?P<n>[1-9]\d{0,9})"
)


@dataclass(frozen=True)
class Delivery:
    """One delivery to store with the change that calls for it: ``kind`` about ``task_id`` at
    audit position ``event_seq``; ``url`` None means the destination configured for the kind
    when it is sent."""

    kind: str
    task_id: UUID
    tenant: str
    event_seq: int
    url: str | None
    body: Mapping[str, Any]
    at: datetime


@dataclass(frozen=True)
class GitHubTarget:
    """The issue or pull request ``owner/repo#number`` a task came from."""

    owner: str
    repo: str
    number: int


def github_target(task: Task) -> GitHubTarget | None:
    """Where a reply on ``task`` goes: its source is ``issue`` or ``pr`` and its source_id is
    shaped ``owner/repo#N``; else None."""
    if task.source not in GITHUB_SOURCES or not task.source_id:
        return None
    match = _GITHUB_ID.fullmatch(task.source_id)
    if match is None or match["repo"] in (".", ".."):
        return None
    return GitHubTarget(match["owner"], match["repo"], int(match["n"]))


def needs_delivery(task: Task) -> bool:
    """Whether an end of ``task`` calls for a callback or a reply (so its completion must be
    written on the decided path, which stores deliveries, not the set-wise one)."""
    return task.callback_url is not None or github_target(task) is not None


def is_end(event: Event) -> bool:
    """Whether ``event`` takes its task into one of :data:`ENDS` (from another state)."""
    return event.to_state in ENDS and event.from_state is not event.to_state


def task_end(task: Task, event: Event) -> dict[str, Any]:
    """What a callback says about a task's end (and what a reply is rendered from): never the
    payload; the error with whatever looks like a credential masked."""
    error = task.error or (task.state_reason if task.state is not TaskState.COMPLETED else None)
    return {
        "type": f"task.{event.to_state.value}",
        "task_id": str(task.id),
        "tenant": task.tenant,
        "title": task.title,
        "task_type": task.task_type,
        "source": task.source,
        "source_id": task.source_id,
        "state": event.to_state.value,
        "result": task.result if event.to_state is TaskState.COMPLETED else None,
        "error": redact(error) if error else None,
        "reason": redact(event.reason) if event.reason else None,
        "retry_count": task.retry_count,
        "ended_at": event.at.isoformat(),
        "event_seq": event.seq,
    }


def deliveries_for(task: Task, event: Event) -> list[Delivery]:
    """Every delivery ``event`` calls for on ``task`` (the task as the event left it): the
    dead-letter alert of a P0 task, and at a task's end its callback and its reply on GitHub."""
    out: list[Delivery] = []
    alert = dead_letter_alert(task, event)
    if alert is not None:
        out.append(
            Delivery(ALERT_KIND, task.id, task.tenant, event.seq, None, alert.body, event.at)
        )
    if not is_end(event) or not needs_delivery(task):
        return out
    body = task_end(task, event)
    if task.callback_url is not None:
        out.append(
            Delivery(
                CALLBACK_KIND, task.id, task.tenant, event.seq, task.callback_url, body, event.at
            )
        )
    target = github_target(task)
    if target is not None:
        reply = {**body, "repo": f"{target.owner}/{target.repo}", "number": target.number}
        out.append(
            Delivery(GITHUB_REPLY_KIND, task.id, task.tenant, event.seq, None, reply, event.at)
        )
    return out


# --- backoff ------------------------------------------------------------------------------------


def backoff_secs(attempts: int, first: float, longest: float, draw: float) -> float:
    """Seconds before the next try after ``attempts`` failed ones: ``first`` doubling each time up
    to ``longest``, then spread by ``draw`` (a number in [0, 1)) over its upper half, so
    deliveries that failed together do not all come back together."""
    base = min(first * 2.0 ** min(max(attempts - 1, 0), 40), longest)
    return base * (0.5 + 0.5 * draw)


# --- where a callback may go (SSRF) -------------------------------------------------------------

METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)


def forbidden_address(address: str) -> str | None:
    """Why a callback may not be sent to IP ``address`` (loopback, private, link-local,
    unique-local, multicast, unspecified, reserved, cloud metadata, or not globally routable),
    or None when it may."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
            address.split("%", 1)[0]
        )
    except ValueError:
        return "is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    checks = (
        (ip in METADATA_ADDRESSES, "a cloud metadata address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    for hit, why in checks:
        if hit:
            return why
    return None


def is_localhost_name(host: str) -> bool:
    """``localhost``, ``localhost.``, ``*.localhost`` (any case)."""
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def url_host(url: str) -> str | None:
    """The host of an http(s) URL (brackets of an IPv6 literal removed), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    return host


def callback_url_problem(url: str, allow_private: bool) -> str | None:
    """What is wrong with ``url`` as a callback URL as it is submitted, or None: only http and
    https; unless ``allow_private``, a host that is a localhost name or a literal IP address
    that is not public is refused (a name is checked again once resolved, when it is sent)."""
    host = url_host(url)
    if host is None:
        return "must be an http:// or https:// URL with a host"
    if allow_private:
        return None
    if is_localhost_name(host):
        return "must not name localhost"
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    why = forbidden_address(host)
    return None if why is None else f"must not be {why}"


def resolved_problem(addresses: Iterable[str], allow_private: bool) -> str | None:
    """Why a callback host resolving to ``addresses`` may not be sent to (any one of them
    forbidden is enough), or None."""
    found = False
    for address in addresses:
        found = True
        why = None if allow_private else forbidden_address(address)
        if why is not None:
            return f"the callback host resolves to {why}"
    return None if found else "the callback host resolves to no address"


# --- deliveries as people inspect them ----------------------------------------------------------


@dataclass(frozen=True)
class DeliveryAttempt:
    """One try of a delivery: when, the HTTP status (None: no answer), how long, what failed."""

    at: datetime
    status_code: int | None
    duration_ms: float
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """As the API answers it."""
        return {
            "at": self.at.isoformat(),
            "status_code": self.status_code,
            "duration_ms": round(self.duration_ms, 3),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeliveryAttempt:
        """The attempt :meth:`to_json` gave."""
        return cls(
            datetime.fromisoformat(data["at"]),
            data.get("status_code"),
            float(data.get("duration_ms") or 0.0),
            data.get("error"),
        )


@dataclass(frozen=True)
class DeliveryRecord:
    """A stored delivery as people see it (``deliveries list`` and ``show``)."""

    id: int
    kind: str
    task_id: UUID
    tenant: str
    event_seq: int
    url: str | None
    body: Any
    attempts: int
    next_attempt_at: datetime
    delivered_at: datetime | None
    given_up_at: datetime | None
    last_error: str | None
    last_status: int | None
    created_at: datetime
    leased: bool = False
    tries: tuple[DeliveryAttempt, ...] = ()
    """Every attempt (filled by ``show``; empty in lists)."""

    @property
    def state(self) -> str:
        """``pending``, ``delivered`` or ``given_up``."""
        if self.delivered_at is not None:
            return "delivered"
        return "given_up" if self.given_up_at is not None else "pending"

    def to_json(self) -> dict[str, Any]:
        """As the API answers it: a URL shown without what may carry a secret."""
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "task_id": str(self.task_id),
            "tenant": self.tenant,
            "event_seq": self.event_seq,
            "url": redact(self.url) if self.url else None,
            "body": self.body,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at.isoformat(),
            "delivered_at": self.delivered_at.isoformat() if self.delivered_at else None,
            "given_up_at": self.given_up_at.isoformat() if self.given_up_at else None,
            "last_error": self.last_error,
            "last_status": self.last_status,
            "created_at": self.created_at.isoformat(),
            "leased": self.leased,
            "tries": [t.to_json() for t in self.tries],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeliveryRecord:
        """The record :meth:`to_json` gave."""

        def at(key: str) -> datetime | None:
            value = data.get(key)
            return datetime.fromisoformat(value) if value else None

        next_at = at("next_attempt_at")
        created = at("created_at")
        assert next_at is not None and created is not None
        return cls(
            id=int(data["id"]),
            kind=data["kind"],
            task_id=UUID(data["task_id"]),
            tenant=data["tenant"],
            event_seq=int(data["event_seq"]),
            url=data.get("url"),
            body=data.get("body"),
            attempts=int(data["attempts"]),
            next_attempt_at=next_at,
            delivered_at=at("delivered_at"),
            given_up_at=at("given_up_at"),
            last_error=data.get("last_error"),
            last_status=data.get("last_status"),
            created_at=created,
            leased=bool(data.get("leased")),
            tries=tuple(DeliveryAttempt.from_json(t) for t in data.get("tries") or ()),
        )
