"""How fast a worker runs when it is not told: the one place that derives its concurrency, claim
batch, and the claims and outcome writes it keeps in flight.

Every value set explicitly (``--concurrency``, ``[worker] concurrency``, ``[queue] claim_batch``,
``[worker] claims_in_flight``, ``[worker] flushes_in_flight``) wins; each value left unset is
derived here, from the slots and the backend:

- **concurrency**: the slots of each kind of executor the worker runs, added up (the
  ``slots`` :func:`tune` is given): its handlers' (:func:`slots_for_handlers`) ``1000`` when
  all are async (a waiting coroutine costs a few kilobytes, so a no-op handler can fill
  a thousand slots; with them a PostgreSQL worker claims 500 tasks at a time, and the
  server's work per task falls, measured in README, Workers), ``10`` when one runs in a thread
  (a slot holds a thread); each command agent its own ``max_concurrent`` (a slot holds a
  process, and the agent never runs more at once). The handlers then keep their share: the
  agents' slots are never taken by handler tasks.
- **claims in flight**: where the database writes apart from the worker's process (PostgreSQL's
  server; SQLite's writer process, which the worker command starts), ``4`` from 200 slots up,
  ``2`` below (the database works on one claim while the worker starts the tasks of another); on
  SQLite written from a thread of the worker's process, ``2`` (the thread and the event loop
  take turns: more claims only queue).
- **claim batch**: half the slots, so that two claims fill every slot at once and the others in
  flight take slots as they free: ``ceil(concurrency / 2)`` (with one claim in flight, all of
  them), at least 1 and at most 500 where the database writes apart (a claim of many rows
  costs it less per row; claims of 1000 left the worker waiting between them), 250 on SQLite
  written from a thread (a claim holds the file's lock while it writes, and the loop waits).
- **flushes in flight**: as many as the claims in flight (outcomes arrive at the rate tasks are
  claimed).

The worker's start line names the values and which were derived.
"""

from __future__ import annotations

from dataclasses import dataclass

ASYNC_CONCURRENCY = 1000
"""The handlers' slots when every handler is async."""
OTHER_CONCURRENCY = 10
"""The handlers' slots when one runs in a thread (a thread per slot)."""
MAX_CLAIM_BATCH = 500
"""The largest derived claim batch where the database writes apart from the worker..."""
MAX_CLAIM_BATCH_IN_PROCESS = 250
"""...and on SQLite written from a thread of the worker's process."""
MANY_SLOTS = 200


@dataclass(frozen=True)
class Tuning:
    """A worker's speed settings, each given or derived."""

    concurrency: int
    claim_batch: int
    claims_in_flight: int
    flushes_in_flight: int
    derived: frozenset[str]
    """The names of the values derived here (the rest were set)."""

    def describe(self) -> str:
        """``concurrency 1000 (derived), claim batch 500 (derived), ...`` for the start line."""
        parts = []
        for name, label in (
            ("concurrency", "concurrency"),
            ("claim_batch", "claim batch"),
            ("claims_in_flight", "claims in flight"),
            ("flushes_in_flight", "outcome writes in flight"),
        ):
            how = "derived" if name in self.derived else "set"
            parts.append(f"{label} {getattr(self, name)} ({how})")
        return ", ".join(parts)


def slots_for_handlers(handlers: int, all_async: bool) -> int:
    """The slots a worker's ``handlers`` (how many it runs) get when its concurrency is not
    set: none without handlers."""
    if not handlers:
        return 0
    return ASYNC_CONCURRENCY if all_async else OTHER_CONCURRENCY


def tune(
    backend: str,
    *,
    slots: int,
    concurrency: int | None = None,
    claim_batch: int | None = None,
    claims_in_flight: int | None = None,
    flushes_in_flight: int | None = None,
    separate_writer: bool | None = None,
) -> Tuning:
    """The speed settings of a worker on ``backend`` (the store's dialect: ``"postgres"`` or
    ``"sqlite"``) whose executors would hold ``slots`` (their slots added up: handlers'
    from :func:`slots_for_handlers`, each agent's ``max_concurrent``): the given values, and the
    rest derived (see the module's description). ``separate_writer``: whether the database
    writes apart from the worker's process (the store's ``separate_writer``; unset: on
    PostgreSQL only)."""
    apart = backend == "postgres" if separate_writer is None else separate_writer
    derived: set[str] = set()
    if concurrency is None:
        concurrency = max(1, slots)
        derived.add("concurrency")
    if claims_in_flight is None:
        claims_in_flight = 4 if apart and concurrency >= MANY_SLOTS else 2
        derived.add("claims_in_flight")
    if claim_batch is None:
        share = -(-concurrency // min(claims_in_flight, 2))
        most = MAX_CLAIM_BATCH if apart else MAX_CLAIM_BATCH_IN_PROCESS
        claim_batch = max(1, min(most, share))
        derived.add("claim_batch")
    if flushes_in_flight is None:
        flushes_in_flight = claims_in_flight
        derived.add("flushes_in_flight")
    return Tuning(concurrency, claim_batch, claims_in_flight, flushes_in_flight, frozenset(derived))
