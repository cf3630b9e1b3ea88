"""The hot set-wise writes of PostgreSQL (claim, claim_admitting, complete, admit, admit_ids)
count their own metrics (migration 0021) and mark it for the rollup trigger, which counts every
other write's:
the counts are exactly what the trigger alone gives over every event recorded, whatever path
wrote them, and a statement's mark never reaches the next statement of its transaction."""

from __future__ import annotations

import re
from collections import Counter
from importlib import resources

import psycopg
import pytest
from scheduler_helpers import agent

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings
from agentqueue.service.execution import Outcome, OutcomeKind

pytestmark = pytest.mark.postgres

Key = tuple[str, str, str, str, str]


def _trigger_selects() -> list[str]:
    """The two SELECTs of the rollup trigger of migration 0012 (the counts, the depth), over
    every event instead of one statement's: how the trigger alone counts."""
    folder = resources.files("agentqueue") / "store" / "postgres" / "migrations"
    body = (folder / "0012_metrics.sql").read_text()
    body = body[body.index("CREATE FUNCTION aq_metrics_rollup()") :]
    selects = re.findall(r"(SELECT pg_backend_pid\(\)::text.*?)\n\s*ON CONFLICT", body, re.S)
    assert len(selects) == 2
    return [s.replace("aq_new_events", "aq_events") for s in selects]


def stored_counts(url: str) -> Counter[Key]:
    """What aq_metric_counts holds, summed over the writers."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tenant, task_type, agent, metric, label, sum(n)::bigint"
            " FROM aq_metric_counts GROUP BY 1, 2, 3, 4, 5"
        ).fetchall()
    return Counter({tuple(r[:5]): int(r[5]) for r in rows if r[5]})


def recounted(url: str) -> Counter[Key]:
    """What the trigger of 0012 alone would have counted, over every event recorded."""
    out: Counter[Key] = Counter()
    with psycopg.connect(url) as conn:
        for select in _trigger_selects():
            for row in conn.execute(select.encode()).fetchall():
                _, tenant, task_type, agent_name, metric, label, n = row[:7]
                out[(tenant, task_type, agent_name, metric, label)] += int(n)
    return Counter({k: n for k, n in out.items() if n})


async def test_every_path_is_counted_once_as_the_trigger_alone_counts(
    pg_url: str, clock: ManualClock
) -> None:
    # Routed admission (admit_ids, with and without an agent), set-wise admission (admit),
    # claims that admit (a global cap alone: claim_room, claim_admitting), set-wise claims and
    # completions, and the row-by-row writes (fail, retry, cancel).
    routed = AsyncQueue(
        pg_url,
        clock=clock,
        settings=Settings(agents={"fixer": agent(["bugfix"], 3)}),
        actor="tester",
    )
    plain = AsyncQueue(
        pg_url, clock=clock, settings=Settings(queue={"admit_on_submit": False}), actor="tester"
    )
    capped = AsyncQueue(
        pg_url, clock=clock, settings=Settings(admission={"max_active": 50}), actor="tester"
    )
    async with routed, plain, capped:
        for i in range(3):
            await routed.submit(title=f"fix{i}", task_type="bugfix", payload={}, max_retries=2)
            await routed.submit(title=f"doc{i}", task_type="docs", payload={}, tenant="t2")
        assert len(await routed.admit()) == 6
        clock.advance(2)
        first = {t.title: t for t in await routed.claim(10, "w1", None, ["fixer"])}
        assert len(first) == 6
        clock.advance(3)
        done = [t for t in first.values() if t.title != "fix0" and t.title != "doc2"]
        await routed.finish(
            [Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t) for t in done]
        )
        await routed.fail(first["fix0"].id, first["fix0"].lock_token, "flaky")  # a retry
        await routed.cancel(first["doc2"].id, reason="stop")
        clock.advance(120)
        await routed.promote_due_retries()
        assert len(await routed.admit()) == 1  # fix0, routed again
        for i in range(2):
            await plain.submit(title=f"set{i}", task_type="docs", payload={})
        assert len(await plain.admit()) == 2
        clock.advance(1)
        again = await routed.claim(10, "w2", None, ["fixer"])  # fix0's second start, and set*
        assert len(again) == 3
        for i in range(2):
            await capped.submit(title=f"cap{i}", task_type="docs", payload={})
        assert await capped.admit() == []  # the claims admit
        again += await capped.claim(10, "w3")
        assert len(again) == 5
        clock.advance(1)
        await capped.finish(
            [Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t) for t in again]
        )
        assert (await plain.claim(10, "w3")) == []  # nothing left: a claim that updates no row
        assert (await capped.claim(10, "w3")) == []  # nor one that admits

    got = stored_counts(pg_url)
    assert got == recounted(pg_url)
    # And the figures themselves: 10 first starts (fix0's second start is none), 9 completed
    # and 1 cancelled (each after a start), a retry, and nothing left live.
    by_metric: Counter[tuple[str, str]] = Counter()
    for (_, _, _, metric, label), n in got.items():
        by_metric[(metric, "" if metric in ("latency", "completion") else label)] += n
    assert by_metric[("latency", "")] == 10
    assert by_metric[("ended", "completed")] == 9
    assert by_metric[("ended", "cancelled")] == 1
    assert by_metric[("retry", "")] == 1
    assert by_metric[("completion", "")] == 10
    assert not [k for k, n in got.items() if k[3] == "depth" and n]


EVENT_OF = (
    "WITH ev AS (INSERT INTO aq_events (task_id, seq, tenant, at, from_state, to_state, action,"
    " actor, reason, data, hash, row_mac)"
    " SELECT id, event_seq + 100, tenant, now(), 'queued', 'cancelled', 'cancel', 'tester', '',"
    " '{{}}', 'x', 'x' FROM aq_tasks WHERE title = ANY(%s) RETURNING task_id)"
    " SELECT ev.task_id FROM ev {mark}"
)
"""An event for each task titled so (by hand, no state changed); with ``mark`` as the hot
statements set their mark, in their last step."""
MARK = "CROSS JOIN (SELECT set_config('agentqueue.counted', 'on', true)) AS counted_mark"


async def test_a_statements_mark_never_reaches_the_next_one(pg_url: str) -> None:
    async with AsyncQueue(pg_url, settings=Settings(), actor="tester") as queue:
        for title in "abcd":
            await queue.submit(title=title, task_type="docs", payload={})
    with psycopg.connect(pg_url) as conn:
        # One transaction, as an admission that hands over to its worker's claims is.
        conn.execute(EVENT_OF.format(mark=MARK), (["a"],))  # marked: the trigger leaves it
        assert conn.execute("SELECT current_setting('agentqueue.counted', true)").fetchone() == (
            "",
        )
        conn.execute(EVENT_OF.format(mark=""), (["b"],))  # not marked: counted
        conn.execute(EVENT_OF.format(mark=MARK), (["nobody"],))  # marked, no event written
        conn.execute(EVENT_OF.format(mark=""), (["c", "d"],))  # counted
        conn.commit()
    got = stored_counts(pg_url)
    assert got[("default", "docs", "", "ended", "cancelled")] == 3
