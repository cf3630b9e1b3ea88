"""The metrics rollup (migration 0012): every ending, retry, first start and lease lapse is
counted once, on every path that writes one, on both backends; what the exposition makes of it,
with and without the tenant label; the bucket bounds the database keeps."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from importlib import resources

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentqueue import AsyncQueue, ManualClock, TaskState
from agentqueue.config import Settings
from agentqueue.domain.metrics import BUCKETS, LIVE_STATES
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.service.metrics import exposition
from agentqueue.store.base import MetricSnapshot


def counted(snap: MetricSnapshot) -> Counter[tuple[str, str]]:
    """(metric, label) -> count, over every writer, tenant, type and agent."""
    out: Counter[tuple[str, str]] = Counter()
    for c in snap.counts:
        out[(c.metric, c.label)] += c.n
    return out


def bucket_of(seconds: float) -> str:
    """The database's label of the bucket ``seconds`` falls in."""
    return str(sum(1 for b in BUCKETS if b < seconds))


async def claim_all(queue: AsyncQueue, n: int) -> dict[str, object]:
    await queue.admit()
    claimed = await queue.claim(n, "w1")
    assert len(claimed) == n
    return {t.title: t for t in claimed}


async def test_each_ending_retry_first_start_and_lapse_is_counted_once(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    titles = ["bulk", "single", "fatal", "exhausted", "cancelled", "abandoned"]
    for title in titles:
        await queue.submit(title=title, task_type="docs", payload={}, max_retries=0)
    await queue.submit(title="timed", task_type="docs", payload={}, timeout_secs=1, max_retries=0)
    await queue.submit(title="silent", task_type="docs", payload={}, max_retries=0)
    never = (await queue.submit(title="never", task_type="docs", payload={})).task
    await queue.cancel(never.id, reason="not needed")  # pending: cancelled, never started

    clock.advance(2)  # created -> first start: 2 s
    t = await claim_all(queue, 8)
    clock.advance(3)  # start -> ending: 3 s
    bulk = t["bulk"]
    # The set-wise completion, then the row-by-row one.
    await queue.finish([Outcome(bulk.id, bulk.lock_token, OutcomeKind.COMPLETED, claimed=bulk)])
    await queue.complete(t["single"].id, t["single"].lock_token)
    await queue.fail(t["fatal"].id, t["fatal"].lock_token, "no", retryable=False)
    await queue.fail(t["exhausted"].id, t["exhausted"].lock_token, "again")
    await queue.cancel(t["cancelled"].id, reason="stop")
    clock.advance(30)  # the timed-out attempt (1 s) and the silent one's lease (30 s) lapse
    lapsed = {x.title for x in await queue.reclaim_lapsed()}
    assert lapsed == {"timed", "silent", "abandoned"}

    snap = await queue.store.metrics()
    got = counted(snap)
    ended = {label: n for (metric, label), n in got.items() if metric == "ended"}
    assert ended == {
        "completed": 2,
        "failed": 1,
        "dead_letter": 3,  # exhausted, and silent and abandoned (their leases lapsed)
        "timeout": 1,
        "cancelled": 2,
    }
    assert got[("lapse", "timeout")] == 1
    assert got[("lapse", "heartbeat")] == 2
    assert got[("retry", "")] == 0
    # Every task that started, once; and each a 2 s wait.
    assert got[("latency", bucket_of(2.0))] == 8
    assert sum(n for (metric, _), n in got.items() if metric == "latency") == 8
    # Every ending of a started task: 8 (the pending cancel had not started).
    assert sum(n for (metric, _), n in got.items() if metric == "completion") == 8
    assert got[("completion", bucket_of(3.0))] == 5  # the rest ended 30 s later
    await assert_depth_is_stats(queue)


async def assert_depth_is_stats(queue: AsyncQueue) -> None:
    """The depth gauges' figures (kept by the trigger on PostgreSQL, counted on SQLite) equal
    the tasks in each live state."""
    snap = await queue.store.metrics()
    stats = (await queue.stats()).by_state
    for state in LIVE_STATES:
        assert snap.depth.get(("", state), 0) == stats.get(state, 0), state


async def test_retries_and_a_second_start_are_counted_as_the_events_record(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    task = (await queue.submit(title="flaky", task_type="docs", payload={}, max_retries=2)).task
    for _ in range(2):
        await queue.admit()
        [claimed] = await queue.claim(1, "w1")
        await queue.fail(claimed.id, claimed.lock_token, "flaky")
        clock.advance(60)
        await queue.promote_due_retries()
    await queue.admit()
    [claimed] = await queue.claim(1, "w1")
    await queue.complete(claimed.id, claimed.lock_token)

    got = counted(await queue.store.metrics())
    recorded = sum(1 for e in await queue.events(task.id) if "retry" in e.data)
    assert recorded == 2
    assert got[("retry", "")] == recorded
    assert sum(n for (metric, _), n in got.items() if metric == "latency") == 1
    assert got[("ended", "completed")] == 1
    await assert_depth_is_stats(queue)


async def test_the_tenant_label_is_off_by_default_and_on_with_the_setting(
    db_url: str, clock: ManualClock
) -> None:
    for tenant_label in (False, True):
        settings = Settings(metrics={"tenant_label": tenant_label})
        async with AsyncQueue(db_url, clock=clock, settings=settings) as q:
            if not tenant_label:
                for tenant in ("acme", "globex"):
                    await q.submit(title="t", task_type="docs", payload={}, tenant=tenant)
                for claimed in await q.claim(2, "w1"):
                    await q.complete(claimed.id, claimed.lock_token)
            text = (await exposition(await q.runtime())).decode()
        samples = {f.name: f.samples for f in text_string_to_metric_families(text)}
        done = [s for s in samples["agent_tasks"] if s.labels["status"] == "completed"]
        depth = samples["agent_queue_depth"]
        if tenant_label:
            assert {s.labels["tenant"] for s in done} == {"acme", "globex"}
            assert all(s.value == 1 for s in done)
            assert all("tenant" in s.labels for s in depth)
        else:
            assert [s.value for s in done] == [2]
            assert all("tenant" not in s.labels for s in done + depth)


async def test_the_database_buckets_are_the_domain_buckets(queue: AsyncQueue, db_url: str) -> None:
    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///").partition("?")[0]) as conn:
            kept = [r[0] for r in conn.execute("SELECT le FROM aq_metric_buckets ORDER BY le")]
        assert tuple(kept) == BUCKETS
        return
    with psycopg.connect(db_url) as conn:
        for index, bound in enumerate(BUCKETS):
            [[at]] = conn.execute("SELECT aq_metric_bucket(%s)", (bound,)).fetchall()
            [[above]] = conn.execute("SELECT aq_metric_bucket(%s)", (bound * 1.001,)).fetchall()
            assert (int(at), int(above)) == (index, index + 1), bound


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[metrics]\ntenant_label = 'maybe'\n", "metrics.tenant_label"),
        ("[metrics]\ncache_secs = -1\n", "metrics.cache_secs"),
        ("[metrics]\ncolour = 'red'\n", "metrics.colour"),
    ],
)
def test_a_bad_metrics_setting_is_refused_naming_the_field(tmp_path, text: str, field: str) -> None:
    from agentqueue.config import load_settings
    from agentqueue.domain.errors import ConfigError

    path = tmp_path / "agentqueue.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert field in str(refused.value)


@pytest.mark.postgres
async def test_tasks_that_exist_before_the_migration_are_in_the_depth(
    pg_url: str, clock: ManualClock
) -> None:
    """A database with live tasks whose migration 0012 objects are dropped, then made again by
    that migration's own script (and 0021's, which replaces its trigger function): the depth is
    seeded from the table, then kept by the trigger and the statements that count their own."""
    async with AsyncQueue(pg_url, clock=clock) as q:
        for i in range(5):
            await q.submit(title=f"t{i}", task_type="docs", payload={})
        await q.claim(2, "w1")
    folder = resources.files("agentqueue") / "store" / "postgres" / "migrations"
    script = (folder / "0012_metrics.sql").read_text()
    counted_writes = (folder / "0021_counted_writes.sql").read_text()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "DROP TRIGGER aq_events_metrics ON aq_events;"
            " DROP FUNCTION aq_metrics_rollup(); DROP FUNCTION aq_metric_bucket(double precision);"
            " DROP TABLE aq_metric_counts, aq_workers;"
        )
        conn.execute(script.encode())
        conn.execute(counted_writes.encode())
    async with AsyncQueue(pg_url, clock=clock) as q:
        await assert_depth_is_stats(q)
        [claimed] = await q.claim(1, "w1")
        await q.complete(claimed.id, claimed.lock_token)
        await assert_depth_is_stats(q)
        snap = await q.store.metrics()
        assert snap.depth[("", TaskState.QUEUED)] == 2


def rollup_rows(url: str) -> dict[str, Counter[tuple[str, ...]]]:
    """writer -> (tenant, task_type, agent, metric, label) -> n, as stored."""
    out: dict[str, Counter[tuple[str, ...]]] = {}
    with psycopg.connect(url) as conn:
        for writer, *key, n in conn.execute(
            "SELECT writer, tenant, task_type, agent, metric, label, n FROM aq_metric_counts"
        ).fetchall():
            out.setdefault(writer, Counter())[tuple(key)] += n
    return out


def summed(rows: dict[str, Counter[tuple[str, ...]]]) -> Counter[tuple[str, ...]]:
    total: Counter[tuple[str, ...]] = Counter()
    for counts in rows.values():
        total.update(counts)
    return Counter({k: n for k, n in total.items() if n})


def live_pids(url: str) -> set[str]:
    """The server processes of the database's connections now (this one's aside)."""
    with psycopg.connect(url) as conn:
        return {
            str(r[0])
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            ).fetchall()
        }


@pytest.mark.postgres
async def test_compaction_folds_the_rows_of_closed_connections_and_keeps_every_sum(
    pg_url: str, clock: ManualClock
) -> None:
    async def work(q: AsyncQueue, n: int) -> None:
        for i in range(n):
            await q.submit(title=f"t{i}", task_type="docs", payload={})
        await q.admit()
        claimed = await q.claim(n, "w1")
        clock.advance(1)
        await q.finish(
            [Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, claimed=t) for t in claimed]
        )

    settings = Settings(queue={"admit_on_submit": False})
    async with AsyncQueue(pg_url, clock=clock, settings=settings) as gone:
        await work(gone, 6)
    # The closed queue's server processes end as their clients left: wait for them.
    deadline = time.monotonic() + 30
    while set(rollup_rows(pg_url)) & live_pids(pg_url):
        assert time.monotonic() < deadline, "the closed queue's server processes did not end"
        await asyncio.sleep(0.05)
    async with AsyncQueue(pg_url, clock=clock, settings=settings) as live_queue:
        await work(live_queue, 4)
        before = rollup_rows(pg_url)
        running = live_pids(pg_url)
        kept = {w: c for w, c in before.items() if w in running or w == "migration"}
        closed = {w for w in before if w not in kept}
        assert closed and set(kept) - {"migration"}  # both kinds of writer are there
        # The scheduler's periodic steps fold them (a scheduler runs them as it starts).
        await live_queue.scheduler(listen=False).run_periodic()
        after = rollup_rows(pg_url)
        assert set(after) == set(kept) | {"compacted"}
        assert sum(after["compacted"].values()) == sum(sum(before[w].values()) for w in closed)
        for writer, counts in kept.items():
            assert after[writer] == counts  # a live connection's rows are left as they were
        assert summed(after) == summed(before)  # every figure a scrape sums is unchanged
        assert await live_queue.store.compact_metrics() == 0  # nothing left to fold
        snap = await live_queue.store.metrics()
        assert counted(snap)[("ended", "completed")] == 10
        await assert_depth_is_stats(live_queue)


async def test_sqlite_has_nothing_to_compact(tmp_path, clock: ManualClock) -> None:
    async with AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", clock=clock) as q:
        await q.submit(title="t", task_type="docs", payload={})
        assert await q.store.compact_metrics() == 0
