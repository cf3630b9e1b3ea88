"""The work hints read on PostgreSQL (``work_hints``, asked at every scheduler pass and by every
claimer's probe): each flag comes from its partial index, never from a walk over the table, even
when statistics taken with the queue full call pending and queued tasks common. A walk starts at
the table's front, where the tasks finished since lie, so it grows with every task drained."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.store.sqlfile import load_queries

pytestmark = pytest.mark.postgres

N = 2_000


def _scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, relation) of every node of a JSON plan."""
    found = [(plan["Node Type"], plan.get("Relation Name"))]
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


async def test_work_hints_read_partial_indexes_whatever_the_statistics(
    pg_url: str, clock: ManualClock, settings: Settings
) -> None:
    pending = AsyncQueue(pg_url, clock=clock, settings=settings)  # tasks stay pending
    queued = AsyncQueue(pg_url, clock=clock)  # admitted as submitted
    await pending.open()
    await queued.open()
    try:
        for q in (pending, queued):
            await q.submit_many([{"title": f"t{i}", "task_type": "noop"} for i in range(N)])
        hints = await pending.store.work_hints(clock.now())
    finally:
        await pending.close()
        await queued.close()
    assert hints.admissible and hints.queued and not hints.p0_queued

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE aq_tasks")
        # The statistics say what the hints must not be misled by: half pending, half queued.
        share = dict(
            conn.execute(
                "SELECT s.v, f.f FROM pg_stats p, unnest(p.most_common_vals::text::text[]) "
                "WITH ORDINALITY s(v, i) JOIN unnest(p.most_common_freqs) WITH ORDINALITY "
                "f(f, i) USING (i) WHERE p.tablename = 'aq_tasks' AND p.attname = 'state'"
            ).fetchall()
        )
        assert share["pending"] > 0.4 and share["queued"] > 0.4
        row = conn.execute(
            "EXPLAIN (FORMAT JSON) " + load_queries("postgres")["work_hints"],
            {"now": clock.now()},
        ).fetchone()
    assert row is not None
    scans = _scans(row[0][0]["Plan"])
    on_tasks = [node for node, relation in scans if relation == "aq_tasks"]
    assert len(on_tasks) == 7, scans  # one read a flag
    assert "Seq Scan" not in on_tasks, scans
