"""The backlog benchmark: each size on a database of its own, the sizes taking turns at their
claims in rounds, every queue held at its size, and no database left behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from agentqueue.bench import backlog
from agentqueue.bench.common import BenchContext, Sizes, rotated
from agentqueue.queue import AsyncQueue

pytestmark = pytest.mark.postgres

SIZES = (30, 60)
CLAIMS = 7
ROUNDS = 3


def test_sizes_take_turns_and_each_queue_keeps_its_size(
    bench_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = BenchContext(
        pg_url=bench_db, out_dir=tmp_path, work_dir=tmp_path,
        sizes=Sizes(backlog=SIZES, backlog_claims=CLAIMS, backlog_rounds=ROUNDS, claim_size=10),
    )  # fmt: skip
    urls = {backlog.size_url(ctx, size): size for size in SIZES}
    assert len(urls) == len(SIZES) and bench_db not in urls
    timed: list[tuple[int, int]] = []
    original = backlog.time_claims

    async def noting(queue: AsyncQueue, calls: int, n: int) -> list[float]:
        timed.append((urls[queue.url], calls))
        return await original(queue, calls, n)

    monkeypatch.setattr(backlog, "time_claims", noting)
    result = asyncio.run(backlog.run(ctx))

    # Warm-up for each, then rounds in which every size takes its share, the order turned by
    # one each round: a size is never timed all at once, minutes away from the others.
    shares = backlog.shares(CLAIMS, ROUNDS)
    assert shares == [3, 2, 2]
    expected = [(size, backlog.WARMUP_CLAIMS) for size in SIZES] + [
        (size, shares[r]) for r in range(ROUNDS) for size in rotated(list(SIZES), r)
    ]
    assert timed == expected
    assert result["rounds"] == ROUNDS and result["checkpointed"] is True
    for size in SIZES:
        data = result["sizes"][str(size)]
        assert data["claims"] == CLAIMS and len(data["round_medians_ms"]) == ROUNDS
        # Each claimed batch was replaced: the queue ends at the size it was loaded to (more
        # claims than the smaller queue holds, so without it that one would have run dry).
        assert data["queued"] == data["queued_after"] == size
        assert 0 < data["min_ms"] <= data["median_ms"] <= data["max_ms"]
    assert min(SIZES) < (CLAIMS + backlog.WARMUP_CLAIMS) * 10
    assert len(result["round_ratios"]) == ROUNDS
    assert result["ratio_largest_to_smallest"] == pytest.approx(
        result["sizes"]["60"]["median_ms"] / result["sizes"]["30"]["median_ms"]
    )
    with psycopg.connect(bench_db.rsplit("/", 1)[0] + "/postgres") as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)",
            ([url.rsplit("/", 1)[1] for url in urls],),
        ).fetchall()
    assert left == []  # no million rows left behind


def test_shares_split_the_claims_evenly() -> None:
    assert backlog.shares(100, 5) == [20] * 5
    assert backlog.shares(7, 3) == [3, 2, 2]
    assert sum(backlog.shares(101, 4)) == 101


def test_a_checkpoint_the_role_may_not_take_is_reported_not_raised(bench_db: str) -> None:
    """``store.admin.checkpoint`` answers False for a role without the right (neither a
    superuser nor in pg_checkpoint), and the backlog then notes it instead of failing."""
    from agentqueue.store.admin import checkpoint, ensure_database

    server = bench_db.rsplit("/", 1)[0]
    role = f"aq_no_checkpoint_{bench_db.rsplit('_', 1)[1]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        asyncio.run(ensure_database(bench_db))
        assert asyncio.run(checkpoint(bench_db)) is True  # the test server's superuser may
        parts = urlsplit(bench_db)
        as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
        assert asyncio.run(checkpoint(as_role)) is False
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')
