"""The Store protocol: the narrow set of operations every backend provides.

A store never decides a state. It reads tasks, and it applies :class:`Change` records decided by
``domain.states.decide`` with guarded writes (expected state and expected audit position), each
change together with its audit event in one transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from ..domain.access import TokenRecord
from ..domain.audit import Anchor, RowFields, StoredEvent
from ..domain.deliveries import Delivery, DeliveryRecord
from ..domain.models import Event, LogRecord, Task
from ..domain.schedule import Schedule
from ..domain.states import BulkEvent, TaskState


@dataclass(frozen=True)
class Change:
    """A decided change ready to write.

    ``columns`` are the columns it sets (the transition's fields, the state, and the advanced
    audit head); ``task`` is the task as it will be afterwards. The write holds only if the row is
    still in ``expected_state`` at audit position ``expected_event_seq``.
    """

    task: Task
    expected_state: TaskState
    expected_event_seq: int
    event: Event
    columns: Mapping[str, Any]


@dataclass(frozen=True)
class NewTask:
    """A task to insert, as it stands after its first events (its creation, and its admission
    when it was admitted as it was submitted), with those events in order."""

    task: Task
    events: tuple[Event, ...]


@dataclass(frozen=True)
class TaskFilter:
    """What ``list_tasks`` returns: every given condition must hold. Newest first."""

    tenant: str | None = None
    states: tuple[TaskState, ...] = ()
    task_types: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    limit: int = 50
    before_seq: int | None = None
    source_id: str | None = None
    assignee: str | None = None
    labels: tuple[str, ...] = ()
    """The task carries every one of these labels (and may carry more)."""
    created_after: datetime | None = None
    """Created at or after this time."""
    created_before: datetime | None = None
    """Created before this time."""
    agent: str | None = None
    """Routed to this agent."""
    text: str | None = None
    """Found in the title or the source id, whatever its case."""


@dataclass(frozen=True)
class DedupKey:
    """How a new task may match an existing one (R2)."""

    tenant: str
    idempotency_key: str | None
    source: str
    source_id: str | None


@dataclass(frozen=True)
class TaskHead:
    """The audit head recorded on a task row, for verification."""

    task_id: UUID
    tenant: str
    event_seq: int
    last_hash: str
    state: str
    row: RowFields | None = None
    """The fields its head event signs (R24)."""


@dataclass(frozen=True)
class Lease:
    """An executor's hold on a task."""

    task_id: UUID
    lock_token: UUID


@dataclass(frozen=True)
class AuditSnapshot:
    """Ordered streams over one snapshot: task heads by id, events by (task id, seq), the
    numbered events by their global number, the anchors oldest first, and the append-only
    guards of the audit tables."""

    heads: AsyncIterator[TaskHead]
    events: AsyncIterator[StoredEvent]
    numbered: AsyncIterator[tuple[int, str]]
    """(global number, hash) of each numbered event, in order."""
    anchors: AsyncIterator[Anchor]
    guards: AsyncIterator[tuple[str, bool]]
    """(trigger name, whether it is there and fires) for each append-only trigger expected."""


@dataclass(frozen=True)
class Notice:
    """A wake-up: ``channel`` says what changed (see CHANNELS), ``payload`` details it."""

    channel: str
    payload: str = ""


ANCHOR_PAGE = 5_000
"""How many numbers of the global sequence an anchoring step reads and folds at a time."""

CHANNEL_PENDING = "aq_pending"  # tasks became pending: the scheduler may admit them
CHANNEL_QUEUED = "aq_queued"  # tasks became queued: workers may claim them
CHANNEL_REVOKED = "aq_revoked"  # leases were revoked (cancel, takeback); payload: task ids
CHANNEL_CHANGED = "aq_changed"  # something changed (stores without push notifications)
CHANNEL_TOOLS = "aq_tools"  # tasks began waiting on tools: tool runners may take the calls
CHANNEL_OUTBOX = "aq_outbox"  # deliveries were stored: deliverers may send them
CHANNELS = (CHANNEL_PENDING, CHANNEL_QUEUED, CHANNEL_REVOKED, CHANNEL_TOOLS, CHANNEL_OUTBOX)

ROUTED = "to:"
"""A CHANNEL_QUEUED payload that names whose work was queued: ``to:`` and the agents the tasks
were routed to, by commas, ``*`` for tasks routed to no agent (names never hold ``,`` or
``*``). Any other payload is news for every executor (``p0``: a P0 task among it)."""
NO_AGENT = "*"
MAX_PAYLOAD = 7_000
"""Below PostgreSQL's 8,000 bytes of a notice: a longer list is sent as news for everyone."""


def routed_payload(agents: Iterable[str | None]) -> str:
    """The CHANNEL_QUEUED payload of work routed to ``agents`` (None: to no agent); news for
    every executor (``""``) when there are none or too many to name."""
    names = sorted({NO_AGENT if a is None else a for a in agents})
    payload = ROUTED + ",".join(names)
    return payload if names and len(payload) <= MAX_PAYLOAD else ""


def routed_to(payload: str) -> frozenset[str | None] | None:
    """The agents a CHANNEL_QUEUED payload names (None among them: routed to no agent), or
    None when it is news for every executor."""
    if not payload.startswith(ROUTED) or len(payload) == len(ROUTED):
        return None
    return frozenset(None if a == NO_AGENT else a for a in payload[len(ROUTED) :].split(","))


@dataclass(frozen=True)
class WorkHints:
    """Whether each kind of work exists right now (read without taking write locks)."""

    lapsed: bool
    due: bool
    admissible: bool
    queued: bool
    held: bool = False
    """Tasks wait in blocked for their dependencies."""
    tool_timeouts: bool = False
    """A waiting_tool task's tool call has timed out."""
    p0_queued: bool = False
    """A P0 task is queued (a busy worker may preempt for it)."""
    next_schedule_at: datetime | None = None
    """The earliest slot any cron schedule waits for (None: no schedule): the scheduler's cron
    step reads the due schedules only once this has come (see scheduler.steps)."""


@dataclass(frozen=True)
class Candidate:
    """A pending task as admission weighs it."""

    id: UUID
    tenant: str
    task_type: str
    assignee: str | None
    priority: int
    eligible_at: datetime
    seq: int
    kind: str = "task"
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadRow:
    """How many admitted tasks (queued or executing) share a tenant and an agent."""

    tenant: str
    agent: str | None
    count: int


@dataclass(frozen=True)
class Room:
    """What a global cap counts, and whether fair share has tenants to weigh."""

    active: int
    """Admitted tasks: queued or executing."""
    pending: bool
    """Some task is pending (any tenant's, admissible now or not)."""
    several_tenants: bool
    """More than one tenant has pending tasks."""


@dataclass(frozen=True)
class Bucket:
    """A rate limit's stored tokens, as of ``updated_at``."""

    tokens: float
    updated_at: datetime


@dataclass(frozen=True)
class LeaderInfo:
    """Who holds a leadership lease, since when and until when."""

    name: str
    holder: str
    term: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class MetricCount:
    """One summed rollup row of the metrics (see migration 0012): a counter's or a histogram
    bucket's count ``n`` and the sum of its observed values ``total``."""

    tenant: str
    task_type: str
    agent: str
    metric: str
    label: str
    n: int
    total: float


@dataclass(frozen=True)
class WorkerSlots:
    """A worker's executor slots as of its last heartbeat."""

    name: str
    slots: int
    busy: int
    heartbeat_at: datetime


@dataclass(frozen=True)
class MetricSnapshot:
    """What a scrape reads: the rollup's sums and the gauges."""

    counts: list[MetricCount]
    depth: dict[tuple[str, TaskState], int]
    """Live tasks by (tenant, state); the tenant is '' unless read per tenant."""
    oldest_queued_since: datetime | None
    outbox: dict[str, int]
    leader_term: int
    workers: list[WorkerSlots]


@dataclass(frozen=True)
class EndedCount:
    """How many tasks ended in ``state`` in time slot ``slot`` (slot 0 starts at the time
    asked for)."""

    slot: int
    state: str
    count: int


@dataclass(frozen=True)
class EndedTimes:
    """When a task that ran and ended was created, started and ended."""

    created_at: datetime
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True)
class BusyWorker:
    """A worker holding executing tasks: how many, and its latest heartbeat on any."""

    worker: str
    executing: int
    last_heartbeat: datetime | None


@dataclass(frozen=True)
class PausedType:
    """A task type paused during an incident."""

    task_type: str
    paused_at: datetime
    paused_by: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """As the API answers it and ``pause --json`` prints it."""
        return {
            "task_type": self.task_type,
            "paused_at": self.paused_at.isoformat(),
            "paused_by": self.paused_by,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PausedType:
        """The paused type :meth:`to_json` gave."""
        return cls(
            data["task_type"],
            datetime.fromisoformat(data["paused_at"]),
            data["paused_by"],
            data.get("reason", ""),
        )


@dataclass(frozen=True)
class OutboxRow:
    """A stored delivery, as leased for one try."""

    id: int
    kind: str
    task_id: UUID
    tenant: str
    event_seq: int
    url: str | None
    body: Any
    attempts: int
    created_at: datetime
    lease_token: UUID | None = None
    """The lease this try is made under: only its holder may record the try."""


@dataclass(frozen=True)
class DeliveryResult:
    """How one try of a delivery went: delivered at ``at``, or failed with ``error`` and to be
    tried again at ``next_attempt_at`` (or ``given_up``). Recorded only while the lease
    ``lease_token`` still holds; ``status_code`` and ``duration_ms`` are kept with the try."""

    id: int
    at: datetime
    delivered: bool
    error: str | None = None
    next_attempt_at: datetime | None = None
    lease_token: UUID | None = None
    given_up: bool = False
    status_code: int | None = None
    duration_ms: float = 0.0


@dataclass(frozen=True)
class DeliveryFilter:
    """What ``list_deliveries`` returns: every given condition holds; newest first."""

    kind: str | None = None
    state: str | None = None
    task_id: UUID | None = None
    tenant: str | None = None
    limit: int = 50


@dataclass(frozen=True)
class IntakeSource:
    """What the GitHub intake keeps per issue or pull request to treat deliveries that arrive
    out of order as if in order: its open/closed ``state`` and its head commit last seen, each
    with the issue's or pull request's ``updated_at`` at the event that set it (None: unseen)."""

    tenant: str
    source: str
    source_id: str
    state: str | None = None
    state_at: datetime | None = None
    head_sha: str | None = None
    head_at: datetime | None = None


@dataclass(frozen=True)
class Purge:
    """A dead letter to delete (R8 retention) with the event that ends its chain; it holds only
    if the task is still a dead letter at audit position ``expected_event_seq``."""

    task_id: UUID
    expected_event_seq: int
    event: Event


# --- parameters of the operations that take more than four ---------------------------------


@dataclass(frozen=True)
class ClaimParams:
    """What ``claim`` takes: up to ``limit`` queued tasks for ``event.actor`` at ``now``, none
    of a ``paused`` type; only ``task_types`` (None: any); with ``agents``, a task routed to an
    agent only if it is one of them. A lease runs ``ttl_secs``, never past the attempt's
    deadline plus ``grace_secs``; priorities age one level every ``aging_secs``."""

    limit: int
    now: datetime
    event: BulkEvent
    aging_secs: float
    ttl_secs: float
    grace_secs: float
    task_types: Sequence[str] | None = None
    paused: Sequence[str] = ()
    agents: Sequence[str] | None = None
    admit: ClaimAdmission | None = None
    """With it, the claim admits too (admission under a global cap alone)."""


@dataclass(frozen=True)
class ClaimAdmission:
    """What a claim that admits takes beside its own (Settings.claims_admit): with the queued
    tasks, in one claim order, the pending ones of its types that are due, no more than the
    global cap ``max_active`` leaves beside the queued and executing tasks (counted under the
    admission lock), each admitted (``event``, the ADMIT) and claimed in the one transaction;
    with ``one_tenant``, none while several tenants have pending tasks (the planner weighs
    them)."""

    max_active: int
    one_tenant: bool
    event: BulkEvent


@dataclass(frozen=True)
class AdmitParams:
    """What ``admit`` takes: up to ``limit`` pending tasks due at ``now``, none of a ``paused``
    type, priorities aging one level every ``aging_secs``."""

    limit: int
    now: datetime
    aging_secs: float
    event: BulkEvent
    paused: Sequence[str] = ()


@dataclass(frozen=True)
class CandidateQuery:
    """What ``Tx.admission_candidates`` reads: up to ``per_tenant`` admissible pending tasks of
    each priority level of each of ``tenants`` at ``now``; tasks of ``paused`` types left out,
    and those of ``skip_types`` (every agent serving them full) unless they name an assignee or
    are P0 (which may preempt)."""

    now: datetime
    tenants: Sequence[str]
    per_tenant: int
    skip_types: Sequence[str] = ()
    paused: Sequence[str] = ()


# --- inside one write transaction, by role ----------------------------------------------------


class TaskTx(Protocol):
    """Tasks locked and changed inside a transaction. Reads here lock what they return."""

    async def lock(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """The tasks with these ids (in this tenant, if given), locked until commit."""
        ...

    async def lock_lapsed(self, limit: int, now: datetime) -> list[Task]:
        """Executing tasks whose lease has run out."""
        ...

    async def replies(self, tenant: str, ids: Sequence[UUID]) -> list[Task]:
        """The tasks of ``tenant`` that answer any of ``ids`` (their ``in_reply_to``), oldest
        first; read inside the transaction, not locked."""
        ...

    async def lock_due_retries(self, limit: int, now: datetime) -> list[Task]:
        """Retrying tasks whose backoff has elapsed."""
        ...

    async def apply(self, changes: Sequence[Change]) -> set[UUID]:
        """Write each change whose guard holds, with its event; return the ids written."""
        ...

    async def insert_logs(self, records: Sequence[LogRecord]) -> None:
        """Keep captured output with its task."""
        ...

    async def notify(self, channel: str, payload: str = "") -> None:
        """Wake listeners when this transaction commits (a no-op without push notifications)."""
        ...


class DependencyTx(Protocol):
    """Dependencies (R13)."""

    async def lock_dependents_ready(self, limit: int) -> list[Task]:
        """Tasks held for dependencies whose dependencies all completed, or one of which ended
        otherwise (or no longer exists)."""
        ...

    async def task_states(self, ids: Sequence[UUID]) -> dict[UUID, TaskState]:
        """The current state of each task that exists among ``ids``."""
        ...


T = TypeVar("T")
U = TypeVar("U")


class NotArrived(RuntimeError):
    """A later answer was read before its statement was sent (its transaction did not commit)."""


class Later(Generic[T]):
    """The answer of a statement a session sends later: with the transaction's next statement,
    at the latest with its COMMIT (where the database is across a network, a round trip saved;
    on a local file it is sent at once). :meth:`get` sends it now if it is still held back;
    :meth:`result` reads it once it has arrived (after the commit, for one sent last)."""

    def __init__(self, send: Callable[[], Awaitable[None]], read: Callable[[], T]) -> None:
        self._send = send
        self._read = read

    @classmethod
    def now(cls, value: T) -> Later[T]:
        """An answer that is here already."""

        async def sent() -> None:
            return None

        return cls(sent, lambda: value)

    def result(self) -> T:
        """The answer; NotArrived while its statement is still held back."""
        return self._read()

    async def get(self) -> T:
        """The answer, sending what is held back first if need be (one round trip)."""
        await self._send()
        return self._read()

    @classmethod
    def each(cls, answers: Sequence[Later[T]]) -> Later[list[T]]:
        """The answers together (of statements of one session)."""

        async def send() -> None:
            for answer in answers:
                await answer._send()

        return Later(send, lambda: [answer.result() for answer in answers])

    def map(self, convert: Callable[[T], U]) -> Later[U]:
        """The answer, converted (once) as it is read."""
        done: list[U] = []

        def read() -> U:
            if not done:
                done.append(convert(self._read()))
            return done[0]

        return Later(self._send, read)


class AdmissionTx(Protocol):
    """Admission under limits (R12): serialised, counted, and set-wise once decided."""

    async def lock_admission(self, relaxed: bool = True) -> None:
        """Hold the turn to admit under limits until this transaction ends: the transaction's
        next statement runs only once no other transaction is admitting (a dialect may send the
        lock with that statement). ``relaxed``, the transaction's commit need not wait for the
        disk (an admission a crash loses leaves its tasks pending, and the next commit that
        waits makes it durable); an admission that may claim is not relaxed."""
        ...

    async def load_and_tenants(self, limit: int) -> tuple[list[LoadRow], list[str]]:
        """Admitted work (queued or executing) grouped by tenant and agent, and up to
        ``limit`` tenants that have pending tasks: what every routed admission pass reads
        first, under its lock, read together (one round trip)."""
        ...

    async def claim_next(self, params: ClaimParams) -> Later[list[Task]]:
        """Store.claim inside this transaction: the worker whose scheduler admits claims what
        it has room for before the admission commits (nothing is claimed if it rolls back).
        The claim is sent later: with the transaction's next statement, at the latest with its
        COMMIT, so the claimed tasks are read from the returned answer once it has committed
        (or at once with ``get``). A transaction that claims commits durably, as every claim
        does."""
        ...

    async def admit_ids(
        self,
        ids: Sequence[UUID],
        now: datetime,
        event: BulkEvent,
        agent: str | None = None,
        notify: bool = True,
    ) -> Later[list[UUID]]:
        """ADMIT the tasks among ``ids`` still pending and due, sent later (see claim_next):
        the ids admitted, in the order given. Listeners hear CHANNEL_QUEUED at commit, unless
        ``notify`` is false (then notify_queued announces what is left queued)."""
        ...

    async def notify_queued(self, agents: Iterable[str | None]) -> None:
        """Announce CHANNEL_QUEUED at commit if any task is queued then ('p0' if a P0 task
        is), sent later: after the claims of an admission that claimed, so that workers hear
        of what it left queued and not of what it claimed itself. ``agents`` are those it
        admitted tasks to (None: to no agent): the news is theirs (routed_payload)."""
        ...

    async def note_waiting(self, reasons: Mapping[UUID, str], until: datetime) -> None:
        """Record why these pending tasks wait (their ``state_reason``; no state change), and
        leave them out of admission's candidates until ``until``."""
        ...


class PlanningTx(Protocol):
    """What admission's planner reads and keeps: load, candidates, rate buckets, preemption."""

    async def admission_candidates(self, query: CandidateQuery) -> Later[list[Candidate]]:
        """The admissible pending tasks ``query`` asks for, in claim order within each
        tenant's priority level; sent later (see claim_next), so a read made on a guess goes
        with the transaction's next statement."""
        ...

    async def rate_buckets(self, names: Sequence[str]) -> dict[str, Bucket]:
        """The stored buckets of these rate limits (locked until commit); unknown ones absent."""
        ...

    async def save_rate_buckets(self, buckets: Mapping[str, Bucket]) -> None:
        """Store these buckets."""
        ...

    async def preemptible(self, before: datetime, min_priority: int) -> dict[str, int]:
        """Executing tasks of at least ``min_priority`` started no later than ``before``,
        counted by the agent running them (the slots a P0 task may take, R11)."""
        ...


class ToolTx(Protocol):
    """Waiting on tools (R9)."""

    async def lock_tool_timeouts(self, now: datetime, limit: int) -> list[Task]:
        """waiting_tool tasks whose awaited call's deadline has passed."""
        ...

    async def lock_tool_work(self, names: Sequence[str], now: datetime, limit: int) -> list[Task]:
        """waiting_tool tasks with a call of one of these tools that is waiting, or whose
        runner's lease on it (``lease_until_ts``, epoch seconds) has passed."""
        ...

    async def set_tool_calls(self, task: Task, tool_calls: Sequence[Any]) -> bool:
        """Replace the tool calls of ``task`` (still waiting_tool at its audit position): a
        runner's lease on a call, not a change of state."""
        ...


class OutboxTx(Protocol):
    """Deliveries (alerts, callbacks) written with the change that calls for them (R8)."""

    async def enqueue_outbox(self, items: Sequence[Delivery]) -> int:
        """Store deliveries to make, due at once, skipping any already stored for the same
        (kind, task, audit position); return how many were new."""
        ...

    async def lease_outbox(
        self, kind: str, now: datetime, limit: int, until: datetime, token: UUID | None = None
    ) -> list[OutboxRow]:
        """Up to ``limit`` undelivered deliveries of ``kind`` due at ``now`` (none given up),
        oldest first, skipping any another transaction holds; each is leased under ``token``
        (a fresh one if None) and made due again only at ``until``, so no one else tries it
        meanwhile."""
        ...

    async def record_deliveries(self, results: Sequence[DeliveryResult]) -> set[int]:
        """For each try whose lease (``lease_token``) still holds: keep the try, count it, end
        the lease, and mark the delivery delivered or given up, or keep the error and when to
        try next. Returns the ids recorded (a try under a lapsed lease records nothing)."""
        ...

    async def release_outbox(self, tokens: Sequence[UUID], now: datetime) -> int:
        """Hand back the deliveries leased under ``tokens`` and not recorded: due at ``now``.
        Returns how many."""
        ...

    async def retry_delivery(self, delivery_id: int, now: datetime, tenant: str | None) -> bool:
        """Make a pending or given-up delivery due at ``now`` (its tries kept); False if there is
        none such (in ``tenant``, if given), or a deliverer's lease holds it now."""
        ...


class DeliveryReader(Protocol):
    """Deliveries read without write locks."""

    async def next_outbox_due(self, kinds: Sequence[str]) -> datetime | None:
        """When the earliest undelivered delivery of ``kinds`` is due (None: none waits)."""
        ...

    async def list_deliveries(self, flt: DeliveryFilter) -> list[DeliveryRecord]:
        """Deliveries matching ``flt``, newest first (without their tries)."""
        ...

    async def get_delivery(
        self, delivery_id: int, tenant: str | None = None
    ) -> DeliveryRecord | None:
        """One delivery with every try (in ``tenant``, if given), or None."""
        ...


class RetentionTx(Protocol):
    """Dead letter retention (R8)."""

    async def lock_expired_dead_letters(
        self, limit: int, p0_before: datetime, other_before: datetime
    ) -> list[Task]:
        """Up to ``limit`` dead letters that entered dead_letter (``updated_at``) at or before
        ``p0_before`` (P0) or ``other_before`` (others), oldest first, skipping locked ones."""
        ...

    async def purge(self, items: Sequence[Purge]) -> set[UUID]:
        """Delete each task whose guard holds, with its captured output, and append its last
        event (its other events stay); return the ids purged."""
        ...

    async def record_audit(self, record: Anchor) -> int:
        """Append a signed audit record (a purge record); return its id."""
        ...


class IntakeTx(Protocol):
    """What a webhook delivery does in its one transaction (R18)."""

    async def claim_delivery(self, delivery_id: str, event: str, at: datetime) -> bool:
        """Record the delivery id; False if it was recorded already (by a committed twin: a
        racing one is waited for)."""
        ...

    async def delivery_answer(self, delivery_id: str) -> dict[str, Any] | None:
        """The answer recorded for a delivery, if it is recorded."""
        ...

    async def record_delivery_answer(self, delivery_id: str, answer: Mapping[str, Any]) -> None:
        """Keep the answer a claimed delivery got."""
        ...

    async def lock_intake_source(self, tenant: str, source: str, source_id: str) -> IntakeSource:
        """The ordering state of one issue or pull request (empty if new), locked."""
        ...

    async def save_intake_source(self, state: IntakeSource) -> None:
        """Write the ordering state locked with :meth:`lock_intake_source`."""
        ...

    async def lock_live_by_source(self, tenant: str, source: str, source_id: str) -> list[Task]:
        """The source's live tasks, locked, oldest first."""
        ...

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Insert what does not conflict (as Store.insert_tasks), inside this transaction."""
        ...


class Tx(
    TaskTx,
    DependencyTx,
    AdmissionTx,
    PlanningTx,
    ToolTx,
    OutboxTx,
    RetentionTx,
    IntakeTx,
    Protocol,
):
    """Operations inside one write transaction. Reads here lock what they return."""


# --- the store, by role ------------------------------------------------------------------------


class StoreLifecycle(Protocol):
    """Connecting, migrating, and opening write transactions."""

    dialect: str
    push_notifications: bool
    """True when listeners hear each notify (PostgreSQL); else they only hear that something
    changed, and anything that must reach a worker travels in heartbeat replies (SQLite)."""
    separate_writer: bool
    """True when the database writes apart from this process, on another core (PostgreSQL's
    server, SQLite's writer process); False for SQLite written from a thread of this process."""

    @property
    def commits(self) -> int:
        """Write transactions this store has committed (a command that met a lock is run again
        only when none of its writes was saved)."""
        ...

    async def open(self, *, migrate: bool = True, wait_secs: float | None = None) -> None:
        """Connect, and (unless told not to) migrate the schema if it is behind. A schema newer
        than this release raises StoreMisconfigured; an unreachable server is waited for up to
        ``wait_secs`` (None: the store's default) before StoreUnavailable."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def migrate(self) -> list[int]:
        """Apply missing migrations; return the versions applied."""
        ...

    async def schema_version(self) -> int:
        """The highest migration applied."""
        ...

    def latest_schema_version(self) -> int:
        """The highest migration this release ships (the schema is current when
        ``schema_version`` reaches it)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction: commits on success, rolls back on error."""
        ...


class TaskStore(Protocol):
    """The hot transitions, applied set-wise (domain.states.BULK_ACTIONS): each writes exactly
    what decide() would for every row it touches, audit events included, in a transaction of
    its own (one autocommitted statement on PostgreSQL)."""

    async def claim(self, params: ClaimParams) -> list[Task]:
        """CLAIM up to ``params.limit`` queued tasks in claim order (R4) for
        ``params.event.actor``, skipping ones other claimers hold; each gets a fresh lock_token.
        Returns them as claimed, in that order."""
        ...

    async def admit(self, params: AdmitParams) -> list[UUID]:
        """ADMIT up to ``params.limit`` pending tasks that may run now, best first; return
        their ids in that order. Listeners hear CHANNEL_QUEUED once for the batch."""
        ...

    async def complete(
        self,
        items: Sequence[tuple[UUID, UUID, Any]],
        now: datetime,
        event: BulkEvent,
        wake_scheduler: bool = False,
    ) -> dict[UUID, tuple[int, str]]:
        """COMPLETE each (task id, lock_token, result) whose lease still holds; return the new
        audit head (event_seq, last_hash) of each task completed. Listeners hear CHANNEL_PENDING
        once for the batch when tasks wait for dependencies, or when ``wake_scheduler`` (the
        room freed lets admission under caps go on)."""
        ...

    async def insert_tasks(self, new: Sequence[NewTask]) -> dict[UUID, int]:
        """Insert tasks with their first events, skipping any that violate a uniqueness
        rule (dedup or idempotency); return the ids inserted with the ``seq`` each was given.
        Listeners hear CHANNEL_PENDING once for the batch, and CHANNEL_QUEUED if any task was
        inserted already queued."""
        ...

    async def heartbeat(
        self, leases: Sequence[Lease], now: datetime, ttl_secs: float, grace_secs: float
    ) -> set[UUID]:
        """Extend the leases that still hold to ``now + ttl_secs``, but never past the attempt's
        deadline plus ``grace_secs``; return the ids of the leases that hold."""
        ...

    async def save_checkpoint(self, task_id: UUID, lock_token: UUID, checkpoint: Any) -> bool:
        """Keep ``checkpoint`` with an executing task if the lease still holds."""
        ...


class TaskReader(Protocol):
    """Reads that take no write lock."""

    async def find_existing(self, keys: Sequence[DedupKey]) -> list[Task]:
        """Tasks matching any key: same tenant and idempotency_key, or a live task with the same
        tenant, source and source_id."""
        ...

    async def get_tasks(self, ids: Sequence[UUID], tenant: str | None = None) -> list[Task]:
        """The tasks with these ids that exist (in this tenant, if given)."""
        ...

    async def list_tasks(self, flt: TaskFilter) -> list[Task]:
        """Tasks matching the filter, newest first, at most ``flt.limit``."""
        ...

    async def replies(self, tenant: str, ids: Sequence[UUID]) -> list[Task]:
        """The tasks of ``tenant`` that answer any of ``ids`` (their ``in_reply_to``), oldest
        first."""
        ...

    async def events(self, task_id: UUID, tenant: str | None = None) -> list[Event]:
        """The audit events of one task, in order."""
        ...

    async def logs(self, task_id: UUID, tenant: str | None = None) -> list[LogRecord]:
        """Captured output of a task, oldest first."""
        ...

    async def active_load(self) -> list[LoadRow]:
        """Admitted work (queued and executing) per (tenant, agent), as admission counts it,
        read outside a write transaction (for reports: ``show``, ``--until-idle``)."""
        ...

    async def admission_room(self) -> Room:
        """What a global cap counts (queued and executing tasks), whether any task is pending
        and whether more than one tenant has, in one read outside a write transaction: a hint,
        for a scheduler whose workers' claims admit (each claim counts its room again under the
        admission lock)."""
        ...

    async def count_parked(self, now: datetime, tenant: str | None = None) -> int:
        """Pending tasks admission has set aside because no agent can take them."""
        ...

    async def count_by_state(self, tenant: str | None = None) -> dict[TaskState, int]:
        """How many tasks are in each state (states with none are left out)."""
        ...

    async def work_hints(self, now: datetime) -> WorkHints:
        """Whether lapsed leases, due retries, admissible or queued tasks exist."""
        ...

    async def ended_counts(
        self, since: datetime, bucket_secs: int, tenant: str | None = None
    ) -> list[EndedCount]:
        """Tasks that ended at or after ``since``, counted per ``bucket_secs`` slot and state."""
        ...

    async def ended_sample(
        self, since: datetime, limit: int, tenant: str | None = None
    ) -> list[EndedTimes]:
        """The newest ``limit`` tasks that ran and ended at or after ``since``, newest first."""
        ...

    async def busy_workers(self) -> list[BusyWorker]:
        """Every worker holding executing tasks (every tenant), by name."""
        ...

    async def outbox_backlog(self, tenant: str | None = None) -> int:
        """Deliveries neither delivered nor given up."""
        ...

    async def queued_p0(
        self, limit: int = 100, pending_at: datetime | None = None
    ) -> list[tuple[str | None, str]]:
        """(agent, task_type) of queued P0 tasks (up to ``limit`` of them), without repeats;
        with ``pending_at`` (claims admit), of the pending P0 tasks due by then too."""
        ...


class NoticeStore(Protocol):
    """Wake-ups between processes."""

    async def notify(self, channel: str, payload: str = "") -> None:
        """Wake listeners now (outside any transaction)."""
        ...

    def listen(self, channels: Sequence[str]) -> AbstractAsyncContextManager[AsyncIterator[Notice]]:
        """Notices on ``channels`` while the context is open. Without push notifications, a
        ``CHANNEL_CHANGED`` notice whenever another connection commits."""
        ...


class AuditReader(Protocol):
    """The audit trail as a whole, for verification."""

    def audit_snapshot(self) -> AbstractAsyncContextManager[AuditSnapshot]:
        """Every task head and every event, read from one consistent snapshot."""
        ...

    async def anchor_audit(
        self, at: datetime, limit: int, page: int = ANCHOR_PAGE
    ) -> Anchor | None:
        """Record the anchor after the last one (domain.audit.AnchorFold), covering at most
        ``limit`` numbers of the global sequence, up to the highest number no open transaction
        can still hold, read and folded ``page`` numbers at a time outside any transaction; the
        recording under the anchoring lock, one process at a time. None when there was nothing
        to cover, or another process recorded an anchor meanwhile."""
        ...


class LeaderStore(Protocol):
    """Leadership (R21) and pausing."""

    async def lead(self, name: str, holder: str, now: datetime, ttl_secs: float) -> int | None:
        """Take or renew the lease of leadership ``name`` for ``holder`` until ``now + ttl``;
        return its term if ``holder`` leads now, None if someone else's lease holds."""
        ...

    async def resign(self, name: str, holder: str) -> None:
        """Give up leadership ``name`` if ``holder`` has it."""
        ...

    async def leader(self, name: str) -> LeaderInfo | None:
        """Who holds (or last held) leadership ``name``."""
        ...

    async def pause(self, task_type: str, by: str, reason: str, now: datetime) -> None:
        """Stop admitting and claiming tasks of ``task_type`` (no-op if already paused)."""
        ...

    async def resume(self, task_type: str) -> bool:
        """Undo a pause; False if the type was not paused."""
        ...

    async def paused(self) -> list[PausedType]:
        """Every paused task type."""
        ...


class MetricsStore(Protocol):
    """The figures of the Prometheus metrics (R19), and each worker's slots."""

    async def metrics(self, by_tenant: bool = False) -> MetricSnapshot:
        """The rollup's sums and the gauges, read in one go (live counts per tenant with
        ``by_tenant``)."""
        ...

    async def record_worker(self, name: str, slots: int, busy: int, now: datetime) -> None:
        """Keep worker ``name``'s slot counts as of ``now`` (its heartbeat)."""
        ...

    async def forget_worker(self, name: str) -> None:
        """Remove a stopped worker's row."""
        ...

    async def compact_metrics(self) -> int:
        """Fold the rollup rows of writers that are gone into one row per key (the sums are
        unchanged); how many rows were folded."""
        ...


class ScheduleStore(Protocol):
    """Cron schedules (R18)."""

    async def insert_schedule(self, schedule: Schedule) -> bool:
        """Add a schedule; False, writing nothing, if its tenant has one by that name."""
        ...

    async def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        """The schedules of ``tenant`` (of every tenant if None), by tenant and name."""
        ...

    async def delete_schedule(self, tenant: str, name: str) -> Schedule | None:
        """Remove a schedule; return it as it was, or None if there was none."""
        ...

    async def due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        """Schedules whose ``next_at`` has come, earliest first (one index read when none)."""
        ...

    async def advance_schedule(
        self, schedule: Schedule, next_at: datetime, fired: datetime | None, now: datetime
    ) -> bool:
        """Move a schedule on to ``next_at`` (recording ``fired``, the latest slot that fired,
        if any) only if it still waits for ``schedule.next_at``; report whether it did."""
        ...


class TokenStore(Protocol):
    """API tokens (R20): stored by hash, found by the secret's lookup prefix."""

    async def insert_token(self, token: TokenRecord) -> bool:
        """Add a token; False, writing nothing, if its name or prefix is taken."""
        ...

    async def token_by_prefix(self, prefix: str) -> TokenRecord | None:
        """The token with this lookup prefix (revoked and expired ones too), or None."""
        ...

    async def list_tokens(self) -> list[TokenRecord]:
        """Every token, by name."""
        ...

    async def revoke_token(self, name: str, now: datetime) -> TokenRecord | None:
        """Revoke the token called ``name`` as of ``now``; return it, or None if there is no
        such token or it was already revoked."""
        ...


class Store(
    StoreLifecycle,
    TaskStore,
    TaskReader,
    NoticeStore,
    AuditReader,
    LeaderStore,
    ScheduleStore,
    TokenStore,
    DeliveryReader,
    MetricsStore,
    Protocol,
):
    """A durable home for tasks and their audit events."""
