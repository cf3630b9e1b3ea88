"""PostgreSQL: what a transaction's answer does not wait for travels with its next statement.

A transaction's BEGIN and the admission lock have no answer anyone reads, so the session sends
them ahead of the transaction's first statement that has one, in one pipeline: an admission
pass (BEGIN, lock, count) is one round trip where it was three. The server runs them in order,
each statement with its own snapshot, so the count still waits for the lock (the lock's
contract test, tests/store/contract/test_admission.py, holds that). A claim inside an admission
is read only once the admission has committed (its tasks start then), so it goes with the
COMMIT.

Round trips are counted from libpq's own trace of the connection: the client waits for the
server at each Sync (the extended protocol) and each Query (the simple one).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import pq

from agentqueue import AsyncQueue
from agentqueue.config import Settings
from agentqueue.domain.errors import InvalidInput, StoreError, StoreUnavailable
from agentqueue.domain.states import Action, BulkEvent, TaskState, bulk_event
from agentqueue.scheduler.admission import admit_limited
from agentqueue.service import execution
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import (
    CHANNEL_QUEUED,
    ClaimParams,
    NotArrived,
    TaskFilter,
    Tx,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(one_connection: Store) -> Store:
    """A store whose pool holds one connection (every transaction is traced on it)."""
    return one_connection


class Trace:
    """libpq's trace of the pool's one connection while the block runs."""

    def __init__(self, store: Store) -> None:
        self._pool: Any = store._d._pool  # type: ignore[attr-defined]
        self.lines: list[str] = []

    async def __aenter__(self) -> Trace:
        self._file = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in __aexit__)
        async with self._pool.connection() as conn:
            self._conn = conn
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._conn.pgconn.untrace()
        self._file.seek(0)
        self.lines = self._file.read().splitlines()
        self._file.close()

    @property
    def text(self) -> str:
        """The whole trace (a message's SQL may span lines)."""
        return "\n".join(self.lines)

    def sent(self, message: str) -> list[str]:
        """The client's messages of this type."""
        return [line for line in self.lines if line.split("\t")[:3:2] == ["F", message]]

    @property
    def batches(self) -> list[list[list[str]]]:
        """The client's messages (each split at its tabs) up to each wait for the server."""
        batches: list[list[list[str]]] = [[]]
        for line in self.lines:
            fields = line.split("\t")
            if fields[0] != "F":
                continue
            batches[-1].append(fields)
            if fields[2] in ("Sync", "Query"):
                batches.append([])
        return [batch for batch in batches if batch and batch[-1][2] in ("Sync", "Query")]

    @property
    def round_trips(self) -> int:
        """How many times the client waited for the server."""
        return len(self.sent("Sync")) + len(self.sent("Query"))


async def test_a_routed_pass_reads_its_load_and_tenants_with_its_lock(store: Store) -> None:
    """BEGIN, the lock, the admitted load and the tenants with pending work: one round trip."""
    async with Trace(store) as trace, store.transaction() as tx:
        await tx.lock_admission()
        load, tenants = await tx.load_and_tenants(10)
    assert (load, tenants) == ([], [])
    assert trace.round_trips == 2  # BEGIN + lock + load + tenants; COMMIT
    text = trace.text
    assert text.index("pg_advisory_xact_lock(") < text.index("GROUP BY tenant, agent")
    assert (
        text.index("GROUP BY tenant, agent") < text.index("WITH RECURSIVE") < text.index("\tSync")
    )


async def test_a_transaction_that_runs_nothing_sends_nothing(store: Store) -> None:
    async with Trace(store) as trace, store.transaction():
        pass
    assert trace.round_trips == 0


async def test_a_failed_transaction_is_rolled_back_and_the_connection_reused(
    store: Store,
) -> None:
    """An error after the first statement rolls the transaction back (its lock with it): the
    pool's one connection serves the next transaction, which takes the lock at once."""
    async with Trace(store) as failed:
        with pytest.raises(InvalidInput):
            async with store.transaction() as tx:
                await tx.lock_admission()
                await tx.load_and_tenants(1)
                raise InvalidInput("boom")
    # (psycopg then forgets its prepared statements: DEALLOCATE ALL, as after any rollback)
    assert [line.split("\t")[-1] for line in failed.sent("Query")][:1] == [' "ROLLBACK"']
    async with Trace(store) as trace, store.transaction() as tx:
        await tx.lock_admission()
        assert await tx.load_and_tenants(1) == ([], [])
    assert trace.round_trips == 2


async def _pending(pg_url: str, n: int) -> list[UUID]:
    """``n`` tasks waiting in pending (a cap leaves them for admission), in submit order."""
    queue = AsyncQueue(pg_url, settings=Settings(admission={"max_active": 10}))
    try:
        made = await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(n)])
    finally:
        await queue.close()
    return [m.task.id for m in made]


def _admitting(now: datetime) -> BulkEvent:
    return bulk_event(Action.ADMIT, now, "scheduler")


def _claim(now: datetime, limit: int = 10) -> ClaimParams:
    return ClaimParams(limit, now, bulk_event(Action.CLAIM, now, "w1"), 600.0, 30.0, 5.0)


async def test_an_admission_and_its_claim_go_with_its_commit(store: Store, pg_url: str) -> None:
    """BEGIN + lock + load and tenants; then the admission, the claim and the COMMIT: two
    round trips. What the admission and the claim wrote is read after the commit."""
    ids = await _pending(pg_url, 2)
    now = datetime.now(UTC)
    for one in ids:  # the second time, the connection has its statements prepared
        async with Trace(store) as trace, store.transaction() as tx:
            await tx.lock_admission(relaxed=False)
            assert (await tx.load_and_tenants(10))[1] == ["default"]
            admitted = await tx.admit_ids([one], now, _admitting(now))
            claimed = await tx.claim_next(_claim(now))
            for later in (admitted, claimed):
                with pytest.raises(NotArrived):
                    later.result()  # held back until the COMMIT
        assert admitted.result() == [one]
        assert [t.id for t in claimed.result()] == admitted.result()
        assert [t.state for t in claimed.result()] == [TaskState.EXECUTING]
    assert trace.round_trips == 2
    # The last round trip binds three statements: the admission and the claim (prepared by
    # now: bound by name), then the COMMIT.
    last = trace.batches[-1]
    admit, claim, _ = [fields for fields in last if fields[2] == "Bind"]
    [commit] = [fields for fields in last if fields[2] == "Parse"]
    assert admit[3].split()[1] != claim[3].split()[1] != '""'
    assert commit[3].split()[1] == '"COMMIT"' and last.index(claim) < last.index(commit)
    assert await store.count_by_state() == {TaskState.EXECUTING: 2}


async def test_a_claim_that_admits_is_one_round_trip(store: Store, pg_url: str) -> None:
    """Under a global cap alone a claim admits what it takes (Settings.claims_admit): BEGIN,
    the admission lock, the room (counted in a statement after the lock's, so that its
    snapshot sees every admission before), the claim and the COMMIT go together, one round
    trip. The scheduler's pass, with one tenant waiting, is one read and admits nothing."""
    await _pending(pg_url, 4)
    rt = Runtime(store, Settings(admission={"max_active": 3}))
    await rt.paused_types()  # read at most once a second, not in every claim
    async with Trace(store) as trace:
        claimed = await execution.claim(rt, 2, "w1")
    assert len(claimed) == 2 and trace.round_trips == 1
    text = trace.text
    order = ['"BEGIN"', "pg_advisory_xact_lock(", "'agentqueue.claim_room'", "coalesce(p.ah"]
    at = [text.index(marker) for marker in [*order, '"COMMIT"']]
    assert at == sorted(at) and at[-1] < text.index("\tSync")
    assert await admit_limited(rt, 10) == []  # its read prepared on the connection
    async with Trace(store) as trace:
        assert await admit_limited(rt, 10) == []
    assert trace.round_trips == 1 and "BEGIN" not in trace.text
    assert len(await execution.claim(rt, 2, "w1")) == 1  # the room the cap of 3 leaves
    assert await store.count_by_state() == {TaskState.EXECUTING: 3, TaskState.PENDING: 1}


async def test_an_admission_that_claims_announces_only_what_it_leaves_queued(
    store: Store, pg_url: str
) -> None:
    """An admission whose worker claims in it sends no notice of its own admissions: one that
    claims all it admitted announces nothing (the next notice heard is a later marker), and
    one that leaves some queued announces them once, after its claims, as news for the
    executors of what it admitted (here routed to no agent: the handlers')."""
    await _pending(pg_url, 2)
    # A cap and a rate limit: the planner admits (a cap alone leaves it to the claims).
    rt = Runtime(store, PLANNED)
    room = [5]

    async def hand_over(
        tx: Tx, at: datetime, agents: frozenset[str | None]
    ) -> Callable[[bool], None]:
        later = await tx.claim_next(_claim(at, room[0]))
        return lambda committed: later.result()

    async with store.listen([CHANNEL_QUEUED]) as notices:
        first = asyncio.ensure_future(anext(notices))
        await asyncio.sleep(0)
        assert len(await admit_limited(rt, 10, hand_over)) == 2  # both claimed
        await store.notify(CHANNEL_QUEUED, "marker")
        assert (await asyncio.wait_for(first, timeout=10)).payload == "marker"
        await _pending(pg_url, 2)
        heard = asyncio.ensure_future(anext(notices))
        await asyncio.sleep(0)
        room[0] = 1
        assert len(await admit_limited(rt, 10, hand_over)) == 2  # one left queued
        notice = await asyncio.wait_for(heard, timeout=10)
        assert (notice.channel, notice.payload) == (CHANNEL_QUEUED, "to:*")
    assert await store.count_by_state() == {TaskState.EXECUTING: 3, TaskState.QUEUED: 1}


PLANNED = Settings(
    admission={"max_active": 10},
    task_types={"docs": {"rate_limit": "docs"}},
    rate_limits={"docs": {"per_minute": 6000, "burst": 1000}},
)
"""A cap and a rate limit: every admission pass goes through the planner."""


ROUTED = Settings(
    agents={
        "writer": {
            "command": ["true"],
            "task_types": ["docs"],
            "isolation": "none",
            "max_concurrent": 10,
        }
    }
)
"""An agent configured: every admission pass goes through the planner, which routes."""


async def test_a_routed_pass_reads_the_last_passs_candidates_ahead(
    store: Store, pg_url: str
) -> None:
    """A routed pass reads the candidates its predecessor read, on that guess, in the round
    trip of its load and tenants: while the same tenants wait that is its read, and the pass
    takes two round trips (BEGIN, lock, candidates, load, tenants; the admissions and the
    COMMIT) where the first took three. When another tenant has come, the guess is not what
    the pass asks for: it reads its own, and admits the newcomer's task."""
    queue = AsyncQueue(pg_url, settings=ROUTED)
    try:
        await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(3)])
        rt = Runtime(store, ROUTED)
        await rt.paused_types()  # read at most once a second, not in every pass
        async with Trace(store) as first:
            assert len(await admit_limited(rt, 1)) == 1
        async with Trace(store) as second:
            assert len(await admit_limited(rt, 1)) == 1
        other = await queue.submit({"title": "b", "task_type": "docs", "tenant": "b"})
        async with Trace(store) as third:
            admitted = await admit_limited(rt, 2)
    finally:
        await queue.close()
    assert (first.round_trips, second.round_trips, third.round_trips) == (3, 2, 3)
    assert other.task.id in admitted
    assert await store.count_by_state() == {TaskState.QUEUED: 4}


async def test_a_routed_admission_sends_its_writes_with_its_commit(
    store: Store, pg_url: str
) -> None:
    """admit_ids and note_waiting (a routed pass's writes) and the claim go with the COMMIT."""
    await _pending(pg_url, 4)
    now = datetime.now(UTC)
    ids = [t.id for t in (await store.list_tasks(TaskFilter(limit=10)))]
    for batch in (ids[:2], ids[2:]):  # the second time, the statements are prepared
        async with Trace(store) as trace, store.transaction() as tx:
            event = bulk_event(Action.ADMIT, now, "scheduler")
            admitted = await tx.admit_ids(batch[:1], now, event)
            await tx.note_waiting({batch[1]: "no agent"}, now)
            claimed = await tx.claim_next(_claim(now))
        assert admitted.result() == batch[:1] == [t.id for t in claimed.result()]
    assert trace.round_trips == 2  # BEGIN + admit_ids + note_waiting; the claim + COMMIT


async def test_a_held_claim_is_dropped_with_a_rollback(store: Store, pg_url: str) -> None:
    """A transaction that fails before its COMMIT never sends the claim it held: no answer,
    nothing claimed, and the admission rolled back with it."""
    ids = await _pending(pg_url, 1)
    now = datetime.now(UTC)
    with pytest.raises(InvalidInput):
        async with store.transaction() as tx:
            await tx.lock_admission(relaxed=False)
            assert await (await tx.admit_ids(ids, now, _admitting(now))).get() == ids
            later = await tx.claim_next(_claim(now))
            raise InvalidInput("boom")
    with pytest.raises(NotArrived):
        later.result()
    assert await store.count_by_state() == {TaskState.PENDING: 1}


async def test_a_claim_that_fails_with_the_commit_rolls_the_transaction_back(
    store: Store, pg_url: str
) -> None:
    """The claim sent with the COMMIT fails (a negative limit): the error is raised, the
    admission before it is rolled back, and the pool's one connection serves the next
    transaction."""
    ids = await _pending(pg_url, 1)
    now = datetime.now(UTC)
    with pytest.raises(StoreError):
        async with store.transaction() as tx:
            assert await (await tx.admit_ids(ids, now, _admitting(now))).get() == ids
            await tx.claim_next(_claim(now, limit=-1))
    assert await store.count_by_state() == {TaskState.PENDING: 1}
    async with store.transaction() as tx:
        assert await (await tx.admit_ids(ids, now, _admitting(now))).get() == ids
        later = await tx.claim_next(_claim(now))
    assert len(later.result()) == 1


async def test_an_admission_whose_connection_dies_before_its_commit_writes_and_claims_nothing(
    store: Store, pg_url: str
) -> None:
    """The server ends the admission's connection (as a restart would) while its admission and
    claim are still held back: the COMMIT's pipeline fails as the database being away, neither
    answer arrives, nothing is written, and the pool's one connection is replaced for the next
    transaction."""
    ids = await _pending(pg_url, 1)
    now = datetime.now(UTC)
    with pytest.raises(StoreUnavailable):
        async with store.transaction() as tx:
            # The transaction is open on the server.
            assert (await tx.load_and_tenants(10))[1] == ["default"]
            admitted = await tx.admit_ids(ids, now, _admitting(now))
            claimed = await tx.claim_next(_claim(now))
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
                await other.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
    for later in (admitted, claimed):
        with pytest.raises(NotArrived):
            later.result()
    assert await store.count_by_state() == {TaskState.PENDING: 1}
    async with store.transaction() as tx:
        admitted = await tx.admit_ids(ids, now, _admitting(now))
        claimed = await tx.claim_next(_claim(now))
    assert admitted.result() == ids and len(claimed.result()) == 1
