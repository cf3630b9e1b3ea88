"""Floor: the physical limit of a drain, and agentqueue's drain as a fraction of it.

The floor program runs only the SQL of a drain on PostgreSQL: claim batches and completion
batches, the store's own named queries ``claim`` and ``complete`` (read by name from the
store's query files, so it follows any change to them) with the parameters the store sends,
over psycopg directly, their answers in the format the store asks for (``dialect.BINARY``),
pipelined as the drain worker is (``claims_in_flight`` claims and
``flushes_in_flight`` completions under way at once, each on a connection of its own, as the
store's pool gives them, and no more tasks claimed and not completed than the worker's
concurrency). No Python between the statements but handing each claimed row's id
and lock_token to a completion batch.

The parameters are taken, not rebuilt: the first claim batch and its completion go through
the public API (``AsyncQueue.claim`` and ``finish``, as the worker calls them) while the
session records what each named query was sent; the floor then replays those parameters,
with each batch's ids and lock_tokens in the completion's rows. The drain is the drain
benchmark's, on the same N, in the same run. The floor and the drain run in rounds, in turn
(``drain_rounds``: 3, 1 with ``--smoke``), and the fraction is of their median rounds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..domain.states import TaskState
from ..queue import AsyncQueue
from ..service.execution import Outcome, OutcomeKind
from ..store.postgres import dialect as pg
from ..store.sqlfile import load_queries
from ..worker.flusher import OUTCOMES_PER_BATCH
from ..worker.tuning import slots_for_handlers, tune
from .child import DRAIN_SETTINGS
from .common import BenchContext, Row, fmt_rate, median_pass, rate, ratio, rotated, target_row
from .db import count
from .drain import drain_agentqueue, preload_fresh, statistics
from .names import NOOP
from .procs import machine_busy_secs

NAME = "floor"
WORKER = "bench-floor"
FRACTION_TARGET = 0.5
"""The drain should reach at least half of the floor's rate."""
QUERIES = ("claim", "complete")
"""The named queries the floor runs."""


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 2 * ctx.sizes.drain_rounds


@contextmanager
def recording() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Record (name, parameters) of every named query the PostgreSQL store sends meanwhile."""
    sent: list[tuple[str, dict[str, Any]]] = []
    original = pg.PostgresSession.fetch
    original_table = pg.PostgresSession.fetch_table

    async def fetch(
        self: pg.PostgresSession, query: str, params: Mapping[str, Any] | None = None
    ) -> list[Any]:
        sent.append((query, dict(params or {})))
        return await original(self, query, params)

    async def fetch_table(
        self: pg.PostgresSession, query: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[Any]]:
        sent.append((query, dict(params or {})))
        return await original_table(self, query, params)

    pg.PostgresSession.fetch = fetch  # type: ignore[method-assign]
    pg.PostgresSession.fetch_table = fetch_table  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        pg.PostgresSession.fetch = original  # type: ignore[method-assign]
        pg.PostgresSession.fetch_table = original_table  # type: ignore[method-assign]


async def capture(url: str, batch: int) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Claim one batch and complete it through the public API, as the drain worker does;
    the parameters ``claim`` and ``complete`` were sent, and how many tasks that took."""
    queue = AsyncQueue(url, actor=WORKER, settings=DRAIN_SETTINGS)
    try:
        await queue.open()
        with recording() as sent:
            tasks = await queue.claim(batch, WORKER, [NOOP], [])
            await queue.finish(
                [
                    Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t)
                    for t in tasks
                    if t.lock_token is not None
                ],
                actor=WORKER,
            )
    finally:
        await queue.close()
    found = {name: params for name, params in sent if name in QUERIES}
    missing = [name for name in QUERIES if name not in found]
    if missing:
        raise RuntimeError(f"the store did not send {', '.join(missing)}: {[n for n, _ in sent]}")
    return found["claim"], found["complete"], len(tasks)


async def run_floor(
    url: str, n_left: int, claims: int, flushes: int, batch: int, concurrency: int
) -> dict[str, Any]:
    """Drain the ``n_left`` queued tasks at ``url`` with nothing but the two statements, at
    most ``concurrency`` tasks claimed and not yet completed (the worker's slots)."""
    claim_params, complete_params, _ = await capture(url, batch)
    # capture() took one batch; the floor times the rest.
    queries = load_queries("postgres")
    claim_sql, complete_sql = queries["claim"], queries["complete"]
    template = json.loads(complete_params["rows"])[0]
    template.pop("id"), template.pop("token")
    conns = [
        await psycopg.AsyncConnection.connect(
            url, autocommit=True, row_factory=dict_row, options=pg._options()
        )
        for _ in range(claims + flushes)
    ]
    claimed: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue()
    slots = asyncio.Semaphore(max(1, concurrency // batch))  # claim batches the slots hold
    completed = 0
    batches = {"claim": 0, "complete": 0}

    async def claimer(conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            await slots.acquire()
            cur = await conn.execute(claim_sql, claim_params, prepare=True, binary=pg.BINARY)
            rows = await cur.fetchall()
            if not rows:
                slots.release()
                return
            batches["claim"] += 1
            claimed.put_nowait(rows)

    async def completer(conn: psycopg.AsyncConnection[Any]) -> None:
        nonlocal completed
        while True:
            first = await claimed.get()
            if first is None:
                return
            rows, taken = list(first), 1
            while len(rows) < OUTCOMES_PER_BATCH and not claimed.empty():
                more = claimed.get_nowait()
                if more is None:
                    claimed.put_nowait(None)  # for the next completer
                    break
                rows, taken = rows + more, taken + 1
            items = [{"id": str(r["id"]), "token": str(r["lock_token"]), **template} for r in rows]
            params = {**complete_params, "rows": json.dumps(items)}
            cur = await conn.execute(complete_sql, params, prepare=True, binary=pg.BINARY)
            completed += len(await cur.fetchall())
            batches["complete"] += 1
            for _ in range(taken):
                slots.release()

    try:
        busy = machine_busy_secs()
        started = time.perf_counter()
        workers = [asyncio.create_task(completer(c)) for c in conns[claims:]]
        await asyncio.gather(*(claimer(c) for c in conns[:claims]))
        for _ in workers:
            claimed.put_nowait(None)
        await asyncio.gather(*workers)
        elapsed = time.perf_counter() - started
        busy = machine_busy_secs() - busy
    finally:
        for conn in conns:
            await conn.close()
    if completed != n_left:
        raise RuntimeError(f"floor: {completed} of {n_left} tasks completed")
    return {
        "n": n_left,
        "floor_per_s": rate(n_left, elapsed),
        "floor_secs": elapsed,
        # What the statements alone cost the machine a task (the server's work and psycopg's),
        # read as the drain benchmark reads each system's (procs.machine_busy_secs).
        "machine_cpu_us_per_task": busy / n_left * 1e6,
        "claim_batches": batches["claim"],
        "complete_batches": batches["complete"],
    }


async def run(ctx: BenchContext) -> dict[str, Any]:
    """The floor program, then the drain benchmark's drain, on the same N (PostgreSQL)."""
    n = ctx.sizes.drain_n
    # The drain worker's own settings, the unset ones derived as its worker derives them.
    tuning = tune(
        "postgres",
        slots=slots_for_handlers(1, all_async=True),
        concurrency=ctx.sizes.drain_concurrency,
        claim_batch=DRAIN_SETTINGS.queue.claim_batch,
        claims_in_flight=DRAIN_SETTINGS.worker.claims_in_flight,
        flushes_in_flight=DRAIN_SETTINGS.worker.flushes_in_flight,
    )
    claims, flushes, batch = tuning.claims_in_flight, tuning.flushes_in_flight, tuning.claim_batch
    if n < 2 * batch:
        # One batch goes through the public API for the statements' parameters: fewer tasks
        # would leave the floor nothing (or less than a batch) to time.
        raise ValueError(
            f"floor: N={n:,} is under two claim batches ({batch} each, derived from the "
            f"drain's concurrency {ctx.sizes.drain_concurrency}); give --n {2 * batch} or more"
        )

    async def floor_once() -> dict[str, Any]:
        url, _ = await preload_fresh(ctx, "postgresql", n)
        stats = await statistics(url)
        queue = AsyncQueue(url, actor="bench")
        try:
            queued = await count(queue, TaskState.QUEUED)
            floor = await run_floor(
                url,
                queued - min(batch, queued),
                claims,
                flushes,
                batch,
                ctx.sizes.drain_concurrency,
            )
            done = await count(queue, TaskState.COMPLETED)
        finally:
            await queue.close()
        if done != n:
            raise RuntimeError(f"floor: {done} of {n} tasks completed")
        return {**floor, "statistics": stats}

    floors: list[dict[str, Any]] = []
    drains: list[dict[str, Any]] = []
    for turn in range(ctx.sizes.drain_rounds):
        # The floor and the drain in turn, each round starting with the other.
        for what in rotated(["floor", "drain"], turn):
            if what == "floor":
                ctx.progress.step(
                    f"floor: the claim and complete statements alone, round {turn + 1}"
                )
                floors.append(await floor_once())
            else:
                ctx.progress.step(f"floor: the drain on the same N, round {turn + 1}")
                drains.append(
                    await drain_agentqueue(ctx, "postgresql", n, ctx.sizes.drain_concurrency)
                )
            ctx.progress.done()
    floor = median_pass(floors, "floor_per_s")
    drained = median_pass(drains)
    settings = {
        "concurrency": ctx.sizes.drain_concurrency,
        "claim_batch": batch,
        "claims_in_flight": claims,
        "flushes_in_flight": flushes,
        "outcomes_per_batch_max": OUTCOMES_PER_BATCH,
        "queries": list(QUERIES),
    }
    return {
        "n": n,
        "settings": settings,
        "rounds": ctx.sizes.drain_rounds,
        "floor": floor,
        "drain": drained,
        "fraction": ratio(drained["drain_per_s"], floor["floor_per_s"]),
        "notes": [
            f"Floor: N={n:,} no-op tasks preloaded on PostgreSQL, then ANALYZE (as for the "
            "drain); only the store's named "
            f"queries {' and '.join(QUERIES)} run, with the parameters the store sends (taken "
            "from one batch claimed and completed through the public API first, not timed), "
            f"over psycopg: claim batches of {batch}, {claims} claims and {flushes} completions "
            f"under way at once and at most {ctx.sizes.drain_concurrency} tasks claimed and not "
            "completed (as the drain worker), a completion taking every claimed row at hand up "
            f"to {OUTCOMES_PER_BATCH}. Only the ids and lock_tokens pass between.",
            f"Drain: the drain benchmark's (one worker process, concurrency "
            f"{ctx.sizes.drain_concurrency}, same N), on a fresh database.",
            f"Rounds: {ctx.sizes.drain_rounds} of the floor and the drain, in turn, each round "
            "starting with the other; each reported by its median round (every round's rate in "
            "the JSON, rounds_per_s), the fraction of the medians.",
        ],
    }


def _rounds(figures: Mapping[str, Any]) -> str:
    """``; rounds: 12,416/s, 11,127/s`` when there was more than one, else nothing."""
    rounds = figures.get("rounds_per_s") or []
    return f"; rounds: {', '.join(fmt_rate(r) for r in rounds)}" if len(rounds) > 1 else ""


def rows(result: dict[str, Any]) -> list[Row]:
    """The floor's rate, the drain's, and the fraction (target >= 50%)."""
    floor, drained = result["floor"], result["drain"]
    s = result["settings"]
    setting = (
        f"batch {s['claim_batch']}, {s['claims_in_flight']} claims + "
        f"{s['flushes_in_flight']} completions in flight"
    )
    system = "agentqueue (PostgreSQL)"
    return [
        Row(
            NAME,
            "floor program (claim + complete SQL only)",
            f"{fmt_rate(floor['floor_per_s'])} (N={floor['n']:,}, {setting}; machine CPU"
            f" {floor['machine_cpu_us_per_task']:,.0f} us a task{_rounds(floor)})",
            floor["floor_per_s"],
        ),
        Row(
            NAME,
            system,
            f"drain: {fmt_rate(drained['drain_per_s'])} (N={drained['n']:,}{_rounds(drained)})",
            drained["drain_per_s"],
        ),
        target_row(NAME, system, "drain / floor", result["fraction"], ">=", FRACTION_TARGET, "x"),
    ]
