"""Index cost: what one row write of aq_tasks costs on PostgreSQL, and each index's share of it.

A task's every change of state (admit, claim, complete) rewrites its row, and since ``state``
is in the predicates of the table's partial indexes no such update can be HOT: each new row
version gets an entry in every index it matches. This program measures that write alone, with
nothing of the drain around it, and again with each index the claim's new row versions enter
left out, to show what each costs and what dropping one would save.

Preloads N no-op tasks (queued) as every benchmark does (``bench.drain.preload_fresh``: a fresh
database, then ANALYZE). Each measurement is one transaction, rolled back: the named indexes
dropped (``DROP INDEX`` is transactional), then a claim's row change for a batch of queued
tasks picked by ctid (so even the primary key can be left out), as ``EXPLAIN (ANALYZE, WAL)``:
the statement's time and its WAL records per row. The variants run in turn, ``--rounds`` times,
and each is reported by its median::

    .venv/bin/python benchmarks/index_cost.py [--n 20000] [--batch 2000] [--rounds 5]

The server's time per row in one backend on an otherwise idle table: a map of where a row
write's cost goes, not a speed figure (``drain_ab.py`` and ``agentqueue bench`` give those).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
from pathlib import Path

import psycopg

from agentqueue.bench.common import BenchContext, Sizes
from agentqueue.bench.drain import preload_fresh

CLAIM_CHANGE = """
UPDATE aq_tasks t SET state = 'executing', lock_token = gen_random_uuid(), locked_at = now(),
    heartbeat_at = now(), lease_expires_at = now() + interval '1 minute', assigned_to = 'w',
    started_at = now(), updated_at = now(), event_seq = t.event_seq + 1
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM aq_tasks WHERE state = 'queued'
                         ORDER BY priority, eligible_at, seq LIMIT %(batch)s))
"""
"""The row change of a claim (the columns it sets), without its event, hash or metrics."""


async def _prepare(url: str, n: int) -> None:
    """N no-op tasks on a fresh database with planner statistics: the benchmarks' own preload
    (``bench.drain.preload_fresh``), as every drain gets it."""
    with tempfile.TemporaryDirectory() as work:
        ctx = BenchContext(pg_url=url, out_dir=Path(work), work_dir=Path(work), sizes=Sizes())
        await preload_fresh(ctx, "postgresql", n)


def _indexes(conn: psycopg.Connection) -> list[tuple[str, str | None]]:
    """Every index of aq_tasks: its name and its predicate (None: not partial)."""
    rows = conn.execute(
        """SELECT i.relname, pg_get_expr(x.indpred, x.indrelid)
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
           WHERE x.indrelid = 'aq_tasks'::regclass ORDER BY i.relname"""
    ).fetchall()
    return [(str(r[0]), r[1]) for r in rows]


def _entered(conn: psycopg.Connection, indexes: list[tuple[str, str | None]]) -> list[str]:
    """The indexes a claimed row version enters: those without a predicate, and the partial
    ones whose predicate holds for a task as a claim leaves it (one claimed, rolled back)."""
    with conn.transaction(force_rollback=True):
        conn.execute(CLAIM_CHANGE, {"batch": 1})
        out = []
        for name, pred in indexes:
            if pred is not None:
                held = conn.execute(
                    f"SELECT EXISTS (SELECT 1 FROM aq_tasks WHERE state = 'executing' AND {pred})"
                ).fetchone()
                if not (held and held[0]):
                    continue
            out.append(name)
    return out


def _measure(conn: psycopg.Connection, drop: list[str], batch: int) -> tuple[float, float]:
    """Microseconds and WAL records per row of one claim's row change, ``drop`` left out."""
    with conn.transaction(force_rollback=True):
        for name in drop:
            if name == "aq_tasks_pkey":
                conn.execute("ALTER TABLE aq_tasks DROP CONSTRAINT aq_tasks_pkey")
            else:
                conn.execute(f'DROP INDEX "{name}"')
        plan = "\n".join(
            str(r[0])
            for r in conn.execute(
                "EXPLAIN (ANALYZE, WAL, FORMAT TEXT) " + CLAIM_CHANGE, {"batch": batch}
            ).fetchall()
        )
    scanned = re.findall(r"Tid Scan on aq_tasks t .*?actual time=[\d.]+\.\.[\d.]+ rows=(\d+)", plan)
    rows = int(scanned[0]) if scanned else batch
    total = float(re.findall(r"Execution Time: ([\d.]+) ms", plan)[0])
    records = int(re.findall(r"WAL: records=(\d+)", plan)[0])
    return total * 1000 / rows, records / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_index_cost")
    args = parser.parse_args()
    asyncio.run(_prepare(args.pg, args.n))
    with psycopg.connect(args.pg, autocommit=True) as conn:
        indexes = _indexes(conn)
        entered = _entered(conn, indexes)
        variants: dict[str, list[str]] = {"every index": []}
        variants.update({f"without {name}": [name] for name in entered})
        variants["without all of them"] = entered
        figures: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
        _measure(conn, [], args.batch)  # warm the caches
        for _ in range(args.rounds):
            for label, drop in variants.items():
                figures[label].append(_measure(conn, drop, args.batch))
    print(
        f"aq_tasks: {len(indexes)} indexes; a claimed row version enters {len(entered)}: "
        f"{', '.join(entered)}. N={args.n:,}, a claim's row change for {args.batch:,} rows, "
        f"{args.rounds} rounds, medians; load {os.getloadavg()[0]:.2f}"
    )
    print("| variant | us per row | WAL records per row | saved of the write |")
    print("|---|---|---|---|")
    base = statistics.median(us for us, _ in figures["every index"])
    for label, values in figures.items():
        us = statistics.median(v[0] for v in values)
        wal = statistics.median(v[1] for v in values)
        share = "" if label == "every index" else f"{(base - us) / base:.0%}"
        print(f"| {label} | {us:.2f} | {wal:.2f} | {share} |")


if __name__ == "__main__":
    main()
