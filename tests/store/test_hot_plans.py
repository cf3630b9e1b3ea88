"""PostgreSQL: the hot set-wise statements settle on one generic plan per connection.

A prepared statement is planned for its values for its first five runs; PostgreSQL then keeps
the generic plan unless that looks dearer than the plans made so far, and if it does, plans
every later run for its values. A claim or a completion that fell into that would pay its
planning (milliseconds on these machines) at every run. Here each hot statement, run a dozen
times on one connection, makes no plan for its values after the first five."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentqueue.bench.routed import ROUTED as BENCH_ROUTED
from agentqueue.config import Settings
from agentqueue.domain.states import Action, bulk_event
from agentqueue.scheduler.admission import admit_limited
from agentqueue.service import execution
from agentqueue.service.runtime import Runtime
from agentqueue.service.submit import submit_many
from agentqueue.store import Store

pytestmark = pytest.mark.postgres

RUNS = 12
HOT = {
    "insert_tasks": "WITH ins AS (%INSERT INTO aq_tasks%",
    "claim": "WITH picked AS %AS lv(priority)%'queued', 'executing', 'claim'%",
    "complete": "%'executing', 'completed', 'complete'%",
    "admit_ids": "%'pending', 'queued', 'admit'%",
}
"""Each hot statement, by a piece of its text."""


async def test_the_hot_statements_are_not_planned_for_their_values_run_after_run(
    one_connection: Store,
) -> None:
    settings = Settings(**BENCH_ROUTED)  # tasks wait in pending: the planner admits each
    rt = Runtime(one_connection, settings)
    for i in range(RUNS):
        await submit_many(rt, [{"title": f"t{i}", "task_type": "docs"}])
        assert len(await admit_limited(rt, 1)) == 1
        [task] = await execution.claim(rt, 1, "w1")
        now = datetime.now(UTC)
        done = await one_connection.complete(
            [(task.id, task.lock_token, None)], now, bulk_event(Action.COMPLETE, now, "w1")
        )
        assert list(done) == [task.id]
    pool: Any = one_connection._d._pool  # type: ignore[attr-defined]
    async with pool.connection() as conn:
        for name, text in HOT.items():
            rows = await (
                await conn.execute(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE %s",
                    (text,),
                )
            ).fetchall()
            assert len(rows) == 1, (name, rows)
            generic, custom = rows[0]["generic_plans"], rows[0]["custom_plans"]
            assert custom <= 5 and generic + custom == RUNS, (name, generic, custom)
