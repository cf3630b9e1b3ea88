"""The drain benchmark is fair: every system on the same N and the same two clocks, with
planner statistics, agentqueue started as a user starts it, each peer swept over its own
knobs and reported at its best, and a system that does not finish all N reported failed.

The runs are tiny (no speed is asserted: the figures only have to be there and be
consistent). The peer tests need the peers' environment (``agentqueue bench --setup-peers``);
without it the first of them makes it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentqueue.bench.common import BenchContext, Sizes
from agentqueue.bench.drain import (
    best,
    clocks,
    contenders,
    more_rounds,
    peer_run,
    rows,
    sweep,
    tables,
)
from agentqueue.bench.peers import PEERS, check_peers, find_root, setup_peers
from agentqueue.bench.procs import machine_busy_secs

pytestmark = pytest.mark.postgres


def is_rate(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_drain_reports_both_clocks_and_statistics(bench_db: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", "drain", "--smoke", "--n", "100",
         "--rounds", "2", "--no-peers", "--pg", bench_db, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,  # a generous bound: the machines are shared
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    drain = json.loads((out / "results.json").read_text())["results"]["drain"]
    systems = drain["systems"]
    assert set(systems) == {
        "agentqueue-postgresql",
        "agentqueue-postgresql-c500",
        "agentqueue-sqlite",
        "agentqueue-tuned-postgresql",
        "agentqueue-tuned-sqlite",
    }
    # As a user starts it: the command, default flags (one row with --concurrency 500).
    assert systems["agentqueue-postgresql"]["command"] == "agentqueue worker --app m:queue"
    assert systems["agentqueue-postgresql"]["setting"] == "defaults"
    assert systems["agentqueue-postgresql-c500"]["command"].endswith("--concurrency 500")
    for entry in [*systems.values(), *drain["no_statistics"].values()]:
        assert entry["status"] == "ok" and entry["done"] == entry["n"] == 100
        assert is_rate(entry["drain_per_s"]) and is_rate(entry["claim_to_done_per_s"])
        # Both clocks end at the same completion; the first claim comes after the start.
        assert entry["claim_to_done_secs"] <= entry["drain_secs"]
        assert entry["start_to_first_claim_secs"] >= 0
    # What each drain cost the machine, per task: for the worker as users start it (the tuned
    # one, its own child, is not measured so).
    for key, entry in [*systems.items(), *drain["no_statistics"].items()]:
        cpu = entry["machine_cpu_us_per_task"]
        assert (cpu is None) if "tuned" in key else is_rate(cpu), key
    # The default pass has statistics (ANALYZE after the preload); the other pass has none.
    for key in ("agentqueue-postgresql", "agentqueue-postgresql-c500"):
        assert systems[key]["analyzed"] is True
        assert systems[key]["statistics"]["reltuples"] > 0
        assert systems[key]["statistics"]["last_analyze"] is not None
    plain = drain["no_statistics"]["agentqueue-postgresql"]
    assert plain["analyzed"] is False and plain["statistics"]["reltuples"] <= 0
    # The worker as users start it was drained in two rounds (--rounds 2) and is reported by
    # its median; the tuned one, for information, once.
    for key, entry in systems.items():
        rounds = entry.get("rounds_per_s")
        if "tuned" in key:
            assert rounds is None, key
        else:
            assert len(rounds) == 2 and all(is_rate(r) for r in rounds), key
            assert entry["drain_per_s"] == pytest.approx(statistics.median(rounds)), key
    text = (out / "results.md").read_text()
    assert "(rounds: " in text
    assert "| system | setting | process start -> last completion | first claim -> last" in text
    assert "completion | machine CPU per task |" in text
    assert "Without statistics (information only):" in text


def peers_python() -> Path | None:
    python, _ = check_peers(find_root())
    return python


@pytest.fixture(scope="session")
def peers_env() -> Path:
    """The peers' environment, made here when missing (never skipped: on a fresh checkout the
    first test to need it installs the pinned peers, one test process at a time)."""
    root = find_root()
    assert root is not None
    with open(root / ".peers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = peers_python()
        if python is None:
            setup_peers(root)
            python = peers_python()
    assert python is not None, "the peers' environment could not be made"
    return python


needs_peers = pytest.mark.usefixtures("peers_env")


def context(pg_url: str, work: Path) -> BenchContext:
    root = find_root()
    assert root is not None
    return BenchContext(
        pg_url=pg_url,
        out_dir=work,
        work_dir=work,
        sizes=Sizes.for_run(100, smoke=True),
        smoke=True,
        peers=True,
        peers_python=peers_python(),
        peers_dir=root / "benchmarks" / "peers",
    )


PGQUEUER = next(p for p in PEERS if p.name == "pgqueuer")


@needs_peers
def test_a_peer_is_swept_and_reported_at_its_best(bench_db: str, tmp_path: Path) -> None:
    ctx = context(bench_db, tmp_path)
    errors: list[str] = []
    settings = PGQUEUER.grid[:2]
    top = asyncio.run(sweep(ctx, PGQUEUER, settings, 100, True, errors))
    assert errors == []
    entries = top["sweep"]
    labels = [s.label for s in settings]
    assert [e["setting"] for e in entries] == labels == ["C=20, B=10", "C=100, B=50"]
    for entry in entries:
        assert entry["status"] == "ok" and entry["done"] == 100
        assert is_rate(entry["drain_per_s"]) and is_rate(entry["claim_to_done_per_s"])
        assert entry["claim_to_done_secs"] <= entry["drain_secs"]
        # ANALYZE ran on the peer's table after its preload.
        assert entry["analyzed"] is True and entry["statistics"]["reltuples"] > 0
        # Its driver read the machine's busy CPU around its worker, as the bench does for ours.
        assert is_rate(entry["machine_cpu_us_per_task"])
    fastest = max(entries, key=lambda e: e["drain_per_s"])
    assert top["setting"] == fastest["setting"] and top["drain_per_s"] == fastest["drain_per_s"]
    assert top["knobs"] == fastest["knobs"]


@needs_peers
def test_a_peer_drains_again_at_its_best_and_is_reported_by_its_median(
    bench_db: str, tmp_path: Path
) -> None:
    ctx = context(bench_db, tmp_path)
    ctx = replace(ctx, sizes=replace(ctx.sizes, drain_rounds=3))
    errors: list[str] = []
    systems = {"pgqueuer": asyncio.run(sweep(ctx, PGQUEUER, PGQUEUER.grid[1:2], 100, True, errors))}
    first = systems["pgqueuer"]["drain_per_s"]
    asyncio.run(more_rounds(ctx, systems, 100, errors))
    assert errors == []
    entry = systems["pgqueuer"]
    # Three rounds at the setting the sweep chose, the sweep's own the first of them.
    rounds = entry["rounds_per_s"]
    assert len(rounds) == 3 and rounds[0] == first and all(is_rate(r) for r in rounds)
    assert entry["drain_per_s"] == statistics.median(rounds)
    assert entry["setting"] == "C=100, B=50" and entry["status"] == "ok"
    assert [e["setting"] for e in entry["sweep"]] == ["C=100, B=50"]  # the sweep is kept


def test_a_system_that_fails_a_later_round_is_reported_failed() -> None:
    ctx = BenchContext(
        pg_url="postgresql://unused", out_dir=Path("."), work_dir=Path("."),
        sizes=Sizes.for_run(100, smoke=True, rounds=2), smoke=True, peers=True,
    )  # fmt: skip
    failed = {"system": "pgqueuer", "setting": "C=20, B=10", "status": "failed",
              "error": "not finished within 0s", "n": 100, "drain_per_s": None}  # fmt: skip

    async def again_failing(*_: object) -> dict[str, Any]:
        return failed

    systems = {"pgqueuer": {**ok(1000.0), "setting": "C=20, B=10", "sweep": []}}
    errors: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("agentqueue.bench.drain.again", again_failing)
        asyncio.run(more_rounds(ctx, systems, 100, errors))
    entry = systems["pgqueuer"]
    assert entry["status"] == "failed" and entry["drain_per_s"] is None
    assert entry["error"] == "round 2: not finished within 0s"
    assert entry["rounds_per_s"] == [1000.0, None]
    assert errors == ["pgqueuer (C=20, B=10), round 2: not finished within 0s"]


def test_a_peer_picked_by_its_sweep_drains_every_round_again() -> None:
    # The sweep's pass is the best of several: a round of its own would lean the median up.
    # agentqueue as started (one pass) keeps its pass as its first round.
    ctx = BenchContext(
        pg_url="postgresql://unused", out_dir=Path("."), work_dir=Path("."),
        sizes=Sizes.for_run(100, smoke=True, rounds=3), smoke=True, peers=True,
    )  # fmt: skip
    head = contenders(ctx)[0]
    swept = [{**ok(3000.0), "setting": "C=1"}, {**ok(9000.0), "setting": "C=2"}]
    systems = {
        head: {**ok(500.0), "setting": "defaults"},
        "pgqueuer": {**swept[1], "sweep": swept},
    }
    rates = iter([600.0, 700.0, 1000.0, 2000.0, 4000.0])
    runs: list[tuple[str, str]] = []

    async def again_once_more(_ctx: object, key: str, setting: str, _n: int) -> dict[str, Any]:
        runs.append((key, setting))
        return {**ok(next(rates)), "setting": setting}

    errors: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("agentqueue.bench.drain.again", again_once_more)
        asyncio.run(more_rounds(ctx, systems, 100, errors))
    assert errors == []
    # Round 1: only the peer drains; rounds 2 and 3, both, each round starting with the next.
    assert runs == [("pgqueuer", "C=2"), ("pgqueuer", "C=2"), (head, "defaults"),
                    (head, "defaults"), ("pgqueuer", "C=2")]  # fmt: skip
    peer = systems["pgqueuer"]
    assert peer["rounds_per_s"] == [600.0, 700.0, 4000.0] and peer["drain_per_s"] == 700.0
    assert peer["sweep"] == swept  # the sweep is kept, its best pass not counted
    assert systems[head]["rounds_per_s"] == [500.0, 1000.0, 2000.0]


@needs_peers
@pytest.mark.parametrize(
    ("deadline", "env", "why"),
    [
        (0.01, {}, "not finished within 0s"),  # an impossible deadline
        (120.0, {"PEER_FAIL": "1"}, "0 of 100 tasks finished"),  # a failing handler
    ],
)
def test_a_peer_that_does_not_finish_is_reported_failed(
    bench_db: str, tmp_path: Path, deadline: float, env: dict[str, str], why: str
) -> None:
    ctx = context(bench_db, tmp_path)
    entry = asyncio.run(peer_run(ctx, PGQUEUER, PGQUEUER.grid[0], 100, True, deadline, env))
    assert entry["status"] == "failed" and entry["error"] == why
    assert entry["drain_per_s"] is None and entry["claim_to_done_per_s"] is None
    assert entry["done"] < 100


def ok(rate: float) -> dict[str, Any]:
    return {**clocks(100, 100, 0.0, 1.0, 100 / rate), "setting": f"{rate:g}"}


def test_a_failed_peer_gets_no_rate_and_no_ratio() -> None:
    failed = {**clocks(100, 99, 0.0, 1.0, 2.0), "setting": "C=1"}
    assert failed["status"] == "failed" and failed["error"] == "99 of 100 tasks finished"
    assert failed["drain_per_s"] is None and failed["machine_cpu_us_per_task"] is None
    assert best([failed]) is None
    assert best([failed, ok(50.0), ok(80.0)])["setting"] == "80"
    result: dict[str, Any] = {
        "n": 100,
        "systems": {
            "agentqueue-postgresql": {**ok(100.0), "setting": "defaults"},
            "pgqueuer": {**failed, "sweep": [failed]},
        },
    }
    from agentqueue.bench.drain import ratios

    result["ratios"] = ratios(result)
    assert result["ratios"][0]["ratio"] is None
    shown = {r.system: r for r in rows(result)}
    peer = next(r for name, r in shown.items() if name.startswith("pgqueuer"))
    assert peer.figure.startswith("failed: 99 of 100") and peer.value is None
    target = next(r for r in shown.values() if r.target)
    assert target.met is None
    assert "peer failed" in tables(result)


def test_the_machines_busy_time_counts_the_cpu_a_process_burns() -> None:
    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    before = machine_busy_secs()
    child = subprocess.Popen([sys.executable, "-c", burn])
    _, _, usage = os.wait4(child.pid, 0)
    spent = machine_busy_secs() - before
    # Every process's CPU is in it: at least what the child used (the tick is 10 ms).
    assert spent >= usage.ru_utime + usage.ru_stime - 0.05
