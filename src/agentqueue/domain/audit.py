"""The tamper-evident audit chain (R3).

Each task has its own chain of events numbered 1, 2, 3, ... Every event's hash covers the previous
event's hash and every field of the event, so changing an event breaks its hash and deleting one
breaks the numbering or the head recorded on the task (``event_seq``, ``last_hash``).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from .models import Event, Task
from .task_state import TaskState

GENESIS = "0" * 64
"""The "previous hash" of every task's first event."""

PURGE_ACTION = "purge"
"""The action of the last event of a task whose row retention removed (R8). Its chain is the
only one that may outlive its task row, and nothing may follow it."""


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""One encoder for every call (``json.dumps`` with options builds one each time)."""


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value that hashes are taken over (sorted keys, no spaces)."""
    return _CANONICAL.encode(value)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def canonical_time(at: datetime) -> int:
    """Microseconds since the Unix epoch: the same number from every store."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class AuditKey:
    """A key the audit hashes are taken with (HMAC-SHA256). Kept outside the database: whoever
    holds only the database cannot make a hash that verifies. Never logged, never shown: only
    its ``key_id`` (the first 8 hex digits of its SHA-256) is written beside each hash."""

    secret: bytes

    def __repr__(self) -> str:
        return f"AuditKey({self.key_id})"

    @property
    def key_id(self) -> str:
        """Names the key in each hash it made, so old events stay verifiable after rotation."""
        return hashlib.sha256(self.secret).hexdigest()[:8]

    def pads(self) -> tuple[bytes, bytes]:
        """The HMAC inner and outer padded keys: with them SQL computes the same HMAC from
        plain SHA-256, ``sha256(opad || sha256(ipad || message))``."""
        block = self.secret if len(self.secret) <= 64 else hashlib.sha256(self.secret).digest()
        block = block.ljust(64, b"\0")
        return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)

    def setting(self) -> str:
        """The session setting through which PostgreSQL's ``aq_event_hash`` gets this key:
        ``<key id>:<ipad hex>:<opad hex>``."""
        ipad, opad = self.pads()
        return f"{self.key_id}:{ipad.hex()}:{opad.hex()}"

    def sign(self, material: str) -> str:
        """``<key id>:<HMAC-SHA256 hex>`` of ``material``."""
        digest = hmac.new(self.secret, material.encode(), hashlib.sha256).hexdigest()
        return f"{self.key_id}:{digest}"


@dataclass(frozen=True)
class Keyring:
    """The key new hashes are made with (None: the plain SHA-256 of before, which anyone with
    the database can recompute) and older keys that only verify."""

    current: AuditKey | None = None
    old: tuple[AuditKey, ...] = ()

    def find(self, key_id: str) -> AuditKey | None:
        """The key named ``key_id``, current or old."""
        for key in (self.current, *self.old):
            if key is not None and key.key_id == key_id:
                return key
        return None

    def seal(self, material: str) -> str:
        """The hash of ``material``: keyed with the current key, else plain SHA-256."""
        if self.current is None:
            return hashlib.sha256(material.encode()).hexdigest()
        return self.current.sign(material)

    def check(self, material: str, stored: str, *, plain_ok: bool = False) -> str | None:
        """None when ``stored`` is the hash of ``material`` under a key of this ring (or plain
        when no key is configured, or ``plain_ok``); else what is wrong, in words."""
        key_id, sep, _ = stored.rpartition(":")
        if not sep:
            if self.current is not None and not plain_ok:
                return "hash is not keyed (anyone with the database could have made it)"
            ok = hmac.compare_digest(hashlib.sha256(material.encode()).hexdigest(), stored)
            return None if ok else "hash does not match its contents"
        key = self.find(key_id)
        if key is None:
            return f"hash was made with key {key_id[:8]!r}, which is not configured"
        if not hmac.compare_digest(key.sign(material), stored):
            return "hash does not match its contents"
        return None


_keys = Keyring()


def install_keys(keys: Keyring) -> None:
    """Make ``keys`` the audit keys of this process (stores and hashes read them)."""
    global _keys
    _keys = keys


def installed_keys() -> Keyring:
    """The audit keys of this process (none until :func:`install_keys`)."""
    return _keys


def _field(text: str) -> str:
    return f"{len(text)}:{text}"


def hash_tail(
    at: datetime,
    from_state: str | None,
    to_state: str,
    action: str,
    actor: str,
    reason: str,
    data_text: str,
) -> str:
    """The part of an event's hashed material that follows its task and position. A change
    applied to a whole batch at once shares it, so stores compute it once per batch."""
    return "".join(
        _field(f)
        for f in (
            str(canonical_time(at)),
            from_state or "",
            to_state,
            action,
            actor,
            reason,
            data_text,
        )
    )


def chain_material(prev_hash: str, task_id: str, tenant: str, seq: int, tail: str) -> str:
    """What an event's hash is taken over."""
    number = str(seq)
    # One string built at once (SQLite runs this for every event a write makes).
    return (
        f"{len(prev_hash)}:{prev_hash}{len(task_id)}:{task_id}{len(tenant)}:{tenant}"
        f"{len(number)}:{number}{tail}"
    )


def chain_hash(prev_hash: str, task_id: str, tenant: str, seq: int, tail: str) -> str:
    """The hash of one event from the previous hash, its task, its position and its tail
    (:func:`hash_tail`): HMAC-SHA256 with the installed key as ``<key id>:<hex>``, or without
    a key the plain SHA-256 as hex. The stores compute exactly this in SQL (``aq_event_hash``).

    Each field goes in as its length, a colon and its text, so no choice of field contents can
    make two different events hash alike. (This runs for every change: it is kept cheap.)
    """
    return _keys.seal(chain_material(prev_hash, task_id, tenant, seq, tail))


def chained_event(
    task: Task,
    seq: int,
    prev_hash: str,
    at: datetime,
    from_state: TaskState | None,
    to_state: TaskState,
    action: str,
    actor: str,
    reason: str,
    data: dict[str, Any],
) -> Event:
    """Event ``seq`` of ``task``'s chain, hashed after ``prev_hash``: the one place an event and
    its hash are made, so a change and a purge are chained alike."""
    text = data_text(data)
    from_value = from_state.value if from_state else None
    tail = hash_tail(at, from_value, to_state.value, action, actor, reason, text)
    return Event(
        task_id=task.id,
        tenant=task.tenant,
        seq=seq,
        at=at,
        from_state=from_state,
        to_state=to_state,
        action=action,
        actor=actor,
        reason=reason,
        data=data,
        hash=chain_hash(prev_hash, str(task.id), task.tenant, seq, tail),
        data_text=text,
    )


@dataclass(frozen=True)
class RowFields:
    """The fields of a task row its head event signs (R24): those that change only together
    with an event. ``payload`` and ``result`` are the row's JSON as the database gives it as
    text (so each store checks its own form)."""

    state: str
    priority: int
    payload: str
    result: str | None
    assigned_to: str | None
    approved_by: str | None
    retry_count: int

    def material(self, event_hash: str) -> str:
        """What ``row_mac`` is taken over, with the head event's hash."""
        return row_material(
            event_hash,
            self.state,
            self.priority,
            self.payload,
            self.result,
            self.assigned_to,
            self.approved_by,
            self.retry_count,
        )


def _maybe(value: str | None) -> str:
    return "~" if value is None else f"{len(value)}:{value}"


def row_material(
    event_hash: str,
    state: str,
    priority: int,
    payload: str,
    result: str | None,
    assigned_to: str | None,
    approved_by: str | None,
    retry_count: int,
) -> str:
    """What ``row_mac`` is taken over: the head event's hash and the row's signed fields, each
    as its length, a colon and its text (``~`` for a NULL). One string built at once: SQLite
    runs this for every row a write changes."""
    level, retries = str(priority), str(retry_count)
    return (
        f"{len(event_hash)}:{event_hash}{len(state)}:{state}{len(level)}:{level}"
        f"{len(payload)}:{payload}{_maybe(result)}{_maybe(assigned_to)}{_maybe(approved_by)}"
        f"{len(retries)}:{retries}"
    )


def row_mac(*columns: Any) -> str:
    """The keyed hash binding a task row's fields to its head event, from the columns
    :func:`row_material` takes, in its order (SQLite's ``aq_row_mac``; PostgreSQL computes the
    same in SQL)."""
    return _keys.seal(row_material(*columns))


@dataclass(frozen=True)
class StoredEvent:
    """An event row exactly as read back for verification (``data_text`` as stored)."""

    task_id: UUID
    tenant: str
    seq: int
    at: datetime
    from_state: str | None
    to_state: str
    action: str
    actor: str
    reason: str
    data_text: str
    hash: str
    gseq: int | None = None
    """Its place in the global sequence of all events, once the anchoring step numbered it."""
    row_mac: str | None = None
    """For the head event: the keyed hash over its hash and its task row's fields."""

    def row_problem(self, row: RowFields, keys: Keyring, plain_upto: int = 0) -> str | None:
        """None when ``row`` is the row this (head) event signed; else why not."""
        plain_ok = self.gseq is not None and self.gseq <= plain_upto
        if self.row_mac is None:
            if keys.current is None or plain_ok:
                return None
            return "the task row's fields are not signed by its last event"
        problem = keys.check(row.material(self.hash), self.row_mac, plain_ok=plain_ok)
        if problem == "hash does not match its contents":
            return (
                "the task row's fields (state, priority, payload, result, assignee, "
                "approved_by, retry_count) differ from those its last event signed"
            )
        return None if problem is None else f"task row: {problem}"

    def hash_problem(self, prev_hash: str, keys: Keyring, plain_upto: int = 0) -> str | None:
        """None when this event's hash holds after ``prev_hash`` under ``keys``; else why not.
        A plain hash passes under a key only for an event numbered at most ``plain_upto``
        (anchored before the key came into use)."""
        material = chain_material(prev_hash, str(self.task_id), self.tenant, self.seq, self._tail())
        plain_ok = self.gseq is not None and self.gseq <= plain_upto
        return keys.check(material, self.hash, plain_ok=plain_ok)

    def expected_hash(self, prev_hash: str) -> str:
        """The hash this event should carry after ``prev_hash`` (with the installed key)."""
        return chain_hash(prev_hash, str(self.task_id), self.tenant, self.seq, self._tail())

    def _tail(self) -> str:
        return hash_tail(
            self.at,
            self.from_state,
            self.to_state,
            self.action,
            self.actor,
            self.reason,
            self.data_text,
        )


@dataclass(frozen=True)
class ChainBreak:
    """The first place a task's chain does not hold, in words a person can act on."""

    task_id: UUID
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"task {self.task_id} event {self.seq}: {self.problem}"

    @classmethod
    def from_text(cls, text: str) -> ChainBreak:
        """The break whose words (``str(brk)``, as the API reports it) are ``text``; ValueError
        if they are not such words."""
        match = _BREAK_TEXT.fullmatch(text)
        if match is None:
            raise ValueError(f"not the words of a chain break: {text[:80]!r}")
        return cls(UUID(match.group(1)), int(match.group(2)), match.group(3))


_BREAK_TEXT = re.compile(r"task ([0-9a-f-]{36}) event (-?\d+): (.*)", re.DOTALL)


def check_chain(
    task_id: UUID,
    events: Iterable[StoredEvent],
    head_seq: int | None,
    head_hash: str | None,
    tenant: str | None = None,
    head_state: str | None = None,
    *,
    row_gone: bool = False,
    keys: Keyring | None = None,
    plain_upto: int = 0,
) -> ChainBreak | None:
    """Check one task's events (in seq order) against each other and the head on the task row.

    ``head_seq``/``head_hash`` are None when the task row is not at hand; then the chain is only
    checked internally. ``head_state``, the state on the task row, must be where the last event
    left the task, so a row edited around a truncated chain is caught too. ``row_gone`` says the
    task row no longer exists: that holds only for a chain that ends in a purge. A purge is
    always the last event.
    """
    ring = _keys if keys is None else keys
    prev = GENESIS
    last_to: str | None = None
    last_action: str | None = None
    expected_seq = 1
    for event in events:
        if event.seq != expected_seq:
            missing = expected_seq if event.seq > expected_seq else event.seq
            return ChainBreak(task_id, missing, f"missing (found event {event.seq} next)")
        if last_action == PURGE_ACTION:
            return ChainBreak(task_id, event.seq, "recorded after the task was purged")
        if tenant is not None and event.tenant != tenant:
            return ChainBreak(task_id, event.seq, "tenant differs from the task's")
        problem = event.hash_problem(prev, ring, plain_upto)
        if problem is not None:
            return ChainBreak(task_id, event.seq, problem)
        prev = event.hash
        last_to = event.to_state
        last_action = event.action
        expected_seq += 1
    last = expected_seq - 1
    if row_gone and last_action != PURGE_ACTION:
        return ChainBreak(task_id, max(last, 1), "its task row is gone, and it was not purged")
    if head_seq is not None and last_action == PURGE_ACTION:
        return ChainBreak(task_id, last, "purged, but its task row is still there")
    if head_seq is not None and last != head_seq:
        if last < head_seq:
            return ChainBreak(task_id, last + 1, f"missing (the task records {head_seq} events)")
        return ChainBreak(task_id, head_seq + 1, "not recorded on the task")
    if head_hash is not None and last > 0 and prev != head_hash:
        return ChainBreak(task_id, last, "hash differs from the one recorded on the task")
    if head_state is not None and last_to is not None and last_to != head_state:
        return ChainBreak(
            task_id, last, f"leaves the task {last_to}, but the task row says {head_state}"
        )
    return None


def data_text(data: Mapping[str, Any]) -> str:
    """The stored text of an event's data."""
    return canonical_json(dict(data))


ANCHOR_KIND = "anchor"
"""A record of the global sequence: the numbers it covers (1..``count``), those of them that
are no event (its gaps), and a running hash over the events among them."""
PURGE_RECORD_KIND = "purge"
"""A record of a purge: the tasks whose rows retention removed (``data``: their ids)."""


def roll(digest: str, event_hash: str) -> str:
    """The running hash over the global sequence after one more event: every event's hash in
    its order, so over each chain's head at every point."""
    return hashlib.sha256((_field(digest) + _field(event_hash)).encode()).hexdigest()


def roll_all(digest: str, event_hashes: Iterable[str]) -> str:
    """:func:`roll` over each of ``event_hashes`` in turn: the same digest, built on bytes, so
    an event costs its SHA-256 and little more (an anchoring step folds a minute of events)."""
    sha256, hexlify = hashlib.sha256, binascii.hexlify
    current = digest.encode()
    head = b"%d:" % len(digest)  # each field is its length in characters, a colon, its text
    for event_hash in event_hashes:
        size = len(event_hash)
        field = b"64:" if size == 64 else b"%d:" % size
        current = hexlify(sha256(head + current + field + event_hash.encode()).digest())
        head = b"64:"  # the digest from here on: a SHA-256 in hex
    return current.decode()


Gaps = tuple[tuple[int, int], ...]
"""Numbers of the global sequence that are no event, as ranges ``(first, last)``, in order."""


@dataclass(frozen=True)
class Anchor:
    """A signed record of the audit trail (R24). For an anchor: ``count`` the highest number of
    the global sequence it covers (every number up to it is an event or one of the gaps its
    ``data`` lists), ``digest`` the running hash (:func:`roll`) over the events up to it; for a
    purge record, ``count`` how many tasks and ``data`` their ids. ``mac`` signs all of it with
    the key (plain SHA-256 without one)."""

    kind: str
    at: datetime
    count: int
    digest: str
    data: str
    mac: str
    id: int | None = None

    def material(self) -> str:
        """What ``mac`` is taken over."""
        fields = (self.kind, str(canonical_time(self.at)), str(self.count), self.digest, self.data)
        return "".join(_field(f) for f in fields)

    def line(self) -> str:
        """This anchor as one line of the anchor file (and of the log)."""
        return canonical_json(
            {
                "id": self.id,
                "kind": self.kind,
                "at": canonical_time(self.at),
                "count": self.count,
                "gaps": self.gap_count,
                "digest": self.digest,
                "mac": self.mac,
            }
        )

    @property
    def keyed(self) -> bool:
        """Signed with a key (not a plain hash)."""
        return ":" in self.mac

    @property
    def after(self) -> int | None:
        """The number the anchor before this one ended at (None for an anchor made before
        anchors recorded it)."""
        value = self.recorded.get("after")
        return value if isinstance(value, int) else None

    @property
    def gaps(self) -> Gaps:
        """The numbers this anchor covers that are no event (a transaction that drew them
        rolled back), as ranges."""
        found = self.recorded.get("gaps") or []
        try:
            return tuple((int(first), int(last)) for first, last in found)
        except (TypeError, ValueError):
            return ()

    @property
    def gap_count(self) -> int:
        """How many numbers this anchor covers that are no event."""
        return sum(last - first + 1 for first, last in self.gaps)

    @property
    def recorded(self) -> dict[str, Any]:
        """An anchor's ``data`` as read (empty for a purge record or data that is no object)."""
        if self.kind != ANCHOR_KIND:
            return {}
        try:
            value = json.loads(self.data)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def make_anchor(kind: str, at: datetime, count: int, digest: str, data: str) -> Anchor:
    """An anchor signed with the installed key."""
    unsigned = Anchor(kind, at, count, digest, data, "")
    return Anchor(kind, at, count, digest, data, _keys.seal(unsigned.material()))


def gaps_between(after: int, upto: int, numbers: Iterable[int]) -> Gaps:
    """The numbers in ``after+1 .. upto`` not among ``numbers`` (ascending), as ranges."""
    gaps: list[tuple[int, int]] = []
    expected = after + 1
    for number in numbers:
        if number > expected:
            gaps.append((expected, number - 1))
        expected = number + 1
    if expected <= upto:
        gaps.append((expected, upto))
    return tuple(gaps)


class AnchorFold:
    """The anchor after ``last``, built a page of numbers at a time: each :meth:`add` folds the
    events of the next numbers into the digest and notes their gaps, so an anchoring step need
    neither hold a whole step's hashes nor fold them in one go. Its ``data`` also says where the
    anchor before ended, and up to which number plain (unkeyed) hashes were there before a key
    was used: carried over from anchor to anchor, set by the first keyed one. However the
    numbers are split into pages, the anchor is the same (a gap across pages is one range)."""

    def __init__(self, last: Anchor | None) -> None:
        self.last = last
        self.after = 0 if last is None else last.count
        self.upto = self.after
        """The highest number folded so far."""
        self.digest = GENESIS if last is None else last.digest
        self.gaps: list[tuple[int, int]] = []

    def add(
        self, hashes: Sequence[str], upto: int | None = None, numbers: Sequence[int] | None = None
    ) -> None:
        """Fold the numbers after :attr:`upto` up to ``upto`` (default: as many as ``hashes``):
        ``hashes`` the hash of every event among them, in order, ``numbers`` their numbers,
        ascending (None: every number is an event, one a hash)."""
        after = self.upto
        count = after + len(hashes) if upto is None else upto
        if count < after:
            raise ValueError(f"#{count} is below #{after}, the last number folded")
        if numbers is None:
            if count - after != len(hashes):
                raise ValueError(
                    f"{len(hashes)} event(s) for the {count - after} number(s) "
                    f"#{after + 1}..#{count}"
                )
        else:
            if len(numbers) != len(hashes):
                raise ValueError(f"{len(numbers)} number(s) for {len(hashes)} event(s)")
            for number in numbers:
                if not after < number <= count:
                    raise ValueError(
                        f"event #{number} is outside the anchor's #{after + 1}..#{count}"
                    )
            for first, last in gaps_between(after, count, numbers):
                if self.gaps and self.gaps[-1][1] + 1 == first:
                    self.gaps[-1] = (self.gaps[-1][0], last)  # a gap that began a page before
                else:
                    self.gaps.append((first, last))
        self.digest = roll_all(self.digest, hashes)
        self.upto = count

    def anchor(self, at: datetime) -> Anchor:
        """The anchor over every number folded, signed with the installed key."""
        last, count = self.last, self.upto
        plain_upto = plain_numbered(last)
        if (last is None or not last.keyed) and _keys.current is not None:
            # The first keyed anchor: what it numbers was written before the key (or with it).
            plain_upto = count
        data = {"after": self.after, "gaps": [list(g) for g in self.gaps], "plain_upto": plain_upto}
        return make_anchor(ANCHOR_KIND, at, count, self.digest, canonical_json(data))


def plain_numbered(anchor: Anchor | None) -> int:
    """Up to which number events may carry plain hashes, as ``anchor`` records it."""
    if anchor is None or anchor.kind != ANCHOR_KIND:
        return 0
    value = anchor.recorded.get("plain_upto", 0)
    return value if isinstance(value, int) else 0


def purge_record(at: datetime, task_ids: Iterable[UUID]) -> Anchor:
    """The signed record of a purge of ``task_ids``."""
    ids = sorted(str(t) for t in task_ids)
    return make_anchor(PURGE_RECORD_KIND, at, len(ids), GENESIS, canonical_json(ids))


def purged_ids(record: Anchor) -> set[UUID]:
    """The task ids a purge record names (none if it is not one)."""
    if record.kind != PURGE_RECORD_KIND:
        return set()
    try:
        return {UUID(t) for t in json.loads(record.data)}
    except (ValueError, TypeError):
        return set()
