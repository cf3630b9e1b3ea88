"""PostgreSQL: the admission's candidates are planned once per connection, in a fixed shape.

Every admission pass under limits reads the heads of the pending tenants' priority levels
(``admission_candidates``). Left to itself PostgreSQL plans that statement for its values at
every pass, because its generic plan looks dearer, and the planning costs more than the read.
The generic plan as PostgreSQL would make it supposes one task a level: it reads a whole level
in a bitmap scan, sorts it and compiles itself with JIT, which with many tasks pending takes
hundreds of milliseconds. So the session fixes the plan's shape first (the ``fixed_plan``
query: the generic plan, sorts and bitmap scans priced out, JIT off) and puts the settings
back right after (``fixed_plan_back``), within the transaction.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agentqueue import AsyncQueue
from agentqueue.bench.routed import ROUTED as BENCH_ROUTED
from agentqueue.config import Settings
from agentqueue.scheduler.admission import admit_limited
from agentqueue.service.runtime import Runtime
from agentqueue.store import Store
from agentqueue.store.base import CandidateQuery
from agentqueue.store.sqlfile import load_queries

pytestmark = pytest.mark.postgres

Q = load_queries("postgres")

ROUTED = Settings(**BENCH_ROUTED)
"""The routed benchmark's six agents: tasks wait in pending and every admission pass reads
candidates (these tasks' type is no agent's: the planner routes them to the handlers)."""

PLANNER = ("plan_cache_mode", "enable_sort", "enable_bitmapscan", "jit")
"""The settings fixed_plan changes."""


def pending_now() -> datetime:
    """A time after every task submitted so far."""
    return datetime.now(UTC) + timedelta(seconds=1)


def _nodes(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index) of every node of a JSON plan."""
    found = [(plan["Node Type"], plan.get("Index Name"))]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def _numbered(sql: str) -> tuple[str, list[str]]:
    """``sql`` with its named placeholders as $1, $2, ... and the names in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql), names


async def test_candidates_are_planned_once_per_connection(
    one_connection: Store, pg_url: str
) -> None:
    """Passes on one connection read their candidates on its one generic plan: the prepared
    statement shows generic plans only, no plan made for the values."""
    queue = AsyncQueue(pg_url, settings=ROUTED)
    try:
        await queue.submit_many([{"title": f"t{i}", "task_type": "docs"} for i in range(8)])
        rt = Runtime(one_connection, ROUTED)
        for _ in range(8):
            assert len(await admit_limited(rt, 1)) == 1
    finally:
        await queue.close()
    pool: Any = one_connection._d._pool  # type: ignore[attr-defined]
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%%AS tenants(tenant)%%'"
            )
        ).fetchall()
    assert len(rows) == 1, rows
    generic, custom = rows[0]["generic_plans"], rows[0]["custom_plans"]
    assert custom == 0 and generic >= 8, (generic, custom)


async def test_the_settings_are_back_after_the_read(one_connection: Store, pg_url: str) -> None:
    """Within the transaction, right after the candidates, the planner's settings are what
    they were before, even where the session had set them otherwise than the server."""
    queue = AsyncQueue(pg_url, settings=ROUTED)
    try:
        await queue.submit({"title": "t", "task_type": "docs"})
    finally:
        await queue.close()
    async with one_connection.transaction() as tx:
        conn = tx._s._conn  # type: ignore[attr-defined]
        # The session's own values (the transaction has not begun: its BEGIN waits for the
        # read).
        await conn.execute("SET plan_cache_mode = force_custom_plan")
        await conn.execute("SET jit = off")
        before = [(await (await conn.execute(f"SHOW {name}")).fetchone())[name] for name in PLANNER]
        query = CandidateQuery(pending_now(), ["default"], 10)
        candidates = await (await tx.admission_candidates(query)).get()
        after = [(await (await conn.execute(f"SHOW {name}")).fetchone())[name] for name in PLANNER]
    assert len(candidates) == 1
    assert before == ["force_custom_plan", "on", "on", "off"]
    assert after == before


async def test_the_fixed_plan_walks_the_tenant_index_in_order(pg_url: str) -> None:
    """With statistics of thousands of pending tasks in one tenant, the generic plan made under
    fixed_plan reads each priority level from the pending tenant index, in order, up to its
    limit: no bitmap scan, no sort, no JIT."""
    queue = AsyncQueue(pg_url, settings=ROUTED)
    try:
        await queue.submit_many(
            [
                {"title": f"t{i}", "task_type": "docs", "priority": random.randint(1, 9)}
                for i in range(5_000)
            ]
        )
    finally:
        await queue.close()
    body, names = _numbered(Q["admission_candidates"])
    values: dict[str, Any] = {
        "now": pending_now(),
        "tenants": ["default"],
        "per_tenant": 400,
        "paused": [],
        "skip_types": [],
    }
    types = {"now": "timestamptz", "tenants": "text[]", "per_tenant": "int"}
    signature = ", ".join(types.get(n, "text[]") for n in names)
    # Client-side binding: EXPLAIN EXECUTE's arguments are written into the statement.
    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("ANALYZE aq_tasks")
        # Any plan is compiled with JIT here unless JIT is off (with 200,000 tasks pending the
        # generic plan's cost passes the server's threshold).
        conn.execute("SET jit_above_cost = 0")
        conn.execute(f"PREPARE candidates({signature}) AS {body}")
        with conn.transaction():
            conn.execute(Q["fixed_plan"])
            explained = conn.execute(
                "EXPLAIN (FORMAT JSON) EXECUTE candidates("
                + ", ".join(f"%({n})s" for n in names)
                + ")",
                values,
            ).fetchone()
            assert explained is not None
            conn.execute(Q["fixed_plan_back"])
    top = explained[0][0]
    nodes = _nodes(top["Plan"])
    assert ("Index Scan", "aq_tasks_pending_tenant") in nodes, nodes
    assert not [n for n, _ in nodes if n in ("Sort", "Bitmap Heap Scan", "Incremental Sort")]
    assert "JIT" not in top
