"""Candidate plans: the admission's candidates statement, planned for its values or generically.

PostgreSQL plans the ``admission_candidates`` statement afresh at every admission pass (its
generic plan looks dearer to it). This program shows what a plan made once would cost: N tasks
pending in one tenant at random priorities (the routed benchmark's six agents configured, so
none is admitted at submit), ANALYZE, then the statement as shipped and two variants meant to
make a generic plan safe (the limit written in as a constant; that, and the tenants' array read
in a subquery so both plans suppose as many tenants), each prepared and run under
``EXPLAIN ANALYZE`` with ``plan_cache_mode`` forced to custom plans, then to the generic plan,
then left to PostgreSQL (after eight runs, its choice's planning and execution times); and
the statement as shipped as the store runs it, after the ``fixed_plan`` query (the generic plan
with sorts and bitmap scans priced out and JIT off; its eighth run)::

    .venv/bin/python benchmarks/candidate_plans.py [--n 200000]

Prints each plan's scans, sorts and limits with their times, and the planning and execution
times: a map of plans on one database, not a speed figure of agentqueue.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re

import psycopg

from agentqueue import AsyncQueue
from agentqueue.bench.common import NOOP
from agentqueue.bench.routed import ROUTED
from agentqueue.config import Settings
from agentqueue.store.admin import drop_database, ensure_database
from agentqueue.store.sqlfile import load_queries, named_queries, without_comment_lines

TYPES = {
    "tenants": "text[]",
    "now": "timestamptz",
    "per_tenant": "int",
    "paused": "text[]",
    "skip_types": "text[]",
}
VALUES = {"tenants": "'{default}'", "now": "now()", "per_tenant": "400", "paused": "'{}'"}
VALUES["skip_types"] = "'{}'"
SHOWN = ("Scan", "Sort", "Limit", "Planning", "Execution", "Functions")
"""What of a plan is printed: its scans, sorts and limits, its times, and JIT if it was used."""


async def load(url: str, n: int) -> None:
    """A fresh database with ``n`` tasks pending in one tenant."""
    await drop_database(url)
    await ensure_database(url)
    queue = AsyncQueue(url, settings=Settings(**ROUTED))
    await queue.open()
    try:
        for start in range(0, n, 10_000):
            specs = [
                {"title": "t", "task_type": NOOP, "priority": random.randint(1, 9)}
                for _ in range(min(10_000, n - start))
            ]
            await queue.submit_many(specs)
    finally:
        await queue.close()


def _prepared(sql: str) -> tuple[str, str]:
    """The PREPARE of ``sql`` (named placeholders numbered) as ``p``, and its EXPLAIN ANALYZE
    EXECUTE with VALUES."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    body = re.sub(r"%\((\w+)\)s", numbered, sql)
    signature = ", ".join(TYPES[n] for n in names)
    run = f"EXPLAIN (ANALYZE, SUMMARY) EXECUTE p({', '.join(VALUES[n] for n in names)})"
    return f"PREPARE p({signature}) AS {body}", run


def _shown(plan: list[str]) -> str:
    return "\n".join(line for line in plan if any(w in line for w in SHOWN))


def explain(url: str, label: str, sql: str) -> None:
    """``sql`` (named placeholders) prepared, then explained under each plan cache mode."""
    prepare, run = _prepared(sql)
    with psycopg.connect(url, autocommit=True) as conn:
        for mode in ("force_custom_plan", "force_generic_plan", "auto"):
            conn.execute(f"SET plan_cache_mode = {mode}")
            conn.execute(prepare)
            for _ in range(1 if mode != "auto" else 8):
                plan = [str(r[0]) for r in conn.execute(run)]
            conn.execute("DEALLOCATE p")
            print(f"--- {label}, plan_cache_mode = {mode}")
            print(_shown(plan))


def explain_fixed(url: str, sql: str) -> None:
    """``sql`` prepared, then explained as the store runs it: in a transaction, after the
    ``fixed_plan`` query (its generic plan, sorts and bitmap scans priced out, JIT off), eight
    times (the first makes the plan; the last is printed)."""
    queries = load_queries("postgres")
    prepare, run = _prepared(sql)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(prepare)
        for _ in range(8):
            with conn.transaction():
                conn.execute(queries["fixed_plan"])
                plan = [str(r[0]) for r in conn.execute(run)]
                conn.execute(queries["fixed_plan_back"])
        conn.execute("DEALLOCATE p")
    print("--- as shipped, as the store runs it (after fixed_plan)")
    print(_shown(plan))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_candidate_plans")
    args = parser.parse_args()
    asyncio.run(load(args.pg, args.n))
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute("ANALYZE aq_tasks")
    shipped = without_comment_lines(named_queries("postgres")["admission_candidates"].sql)
    constant = shipped.replace("LIMIT %(per_tenant)s", "LIMIT 400")
    subquery = constant.replace(
        "unnest(%(tenants)s::text[])", "unnest((SELECT %(tenants)s::text[]))"
    )
    assert shipped != constant != subquery, "the statement no longer reads as this program expects"
    print(f"{args.n:,} tasks pending in one tenant, ANALYZE")
    explain(args.pg, "as shipped", shipped)
    explain(args.pg, "the limit a constant", constant)
    explain(args.pg, "the limit a constant, the tenants in a subquery", subquery)
    explain_fixed(args.pg, shipped)
    asyncio.run(drop_database(args.pg))


if __name__ == "__main__":
    main()
