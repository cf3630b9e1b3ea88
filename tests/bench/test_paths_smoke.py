"""``agentqueue bench routed agent floor --smoke``: the paths users take and the physical floor
run end to end and report their figures with their settings. No speed is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def analyzed(stats: dict[str, object] | None, n: int) -> bool:
    """Whether PostgreSQL's planner had statistics of the ``n`` preloaded tasks as the drain
    began (ANALYZE ran after the preload: it counted them, and said when)."""
    return bool(stats and stats["last_analyze"] is not None and stats["reltuples"] == n)


def test_paths_and_floor_report_their_figures(bench_db: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", "routed", "agent", "floor", "--smoke",
         "--pg", bench_db, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=900,  # a generous bound: the machines are shared
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    doc = json.loads((out / "results.json").read_text())
    assert doc["errors"] == []
    assert set(doc["results"]) == {"routed", "agent", "floor"}

    routed = doc["results"]["routed"]
    n = doc["options"]["sizes"]["drain_n"]
    assert len(routed["settings"]["agents"]) == 6
    assert routed["settings"]["capped"] == "admission.max_active = 2000"
    # The routed drain went through the planner: pending until the scheduler admitted it.
    assert routed["sanity"]["pending_after_preload"] == n
    assert routed["sanity"]["drain_admit"]["admit_actor"] == "scheduler"
    assert routed["passes"]["drain_capped"]["pending_after_preload"] == n
    assert routed["passes"]["drain_unrouted"]["pending_after_preload"] == 0
    for way in ("unrouted", "routed", "capped"):
        assert routed["passes"][f"drain_{way}"]["n"] == n
        assert is_number(routed["passes"][f"drain_{way}"]["drain_per_s"])
        assert len(routed["passes"][f"drain_{way}"]["rounds_per_s"]) == routed["rounds"] == 1
        # Every way drained with planner statistics, taken after its preload (as the drain).
        assert analyzed(routed["passes"][f"drain_{way}"]["statistics"], n)
        latency = routed["latency"][way]
        assert is_number(latency["p50_ms"]) and latency["p50_ms"] <= latency["p99_ms"]
        # Measured to the handler's start, which follows the recorded start (taken as the
        # claiming transaction began).
        recorded = routed["passes"][f"latency_{way}"]
        assert recorded["measured"] == latency["n"]
        assert recorded["recorded_p50_ms"] <= latency["p50_ms"]
    assert is_number(routed["routed_ratio"]) and is_number(routed["capped_ratio"])

    agent = doc["results"]["agent"]
    attempts = agent["attempts"]
    assert attempts["default"]["sandbox"]  # bubblewrap here, or why not
    assert attempts["none"]["sandbox"].startswith("none")
    for way in ("none", "default"):
        assert is_number(attempts[way]["overhead_p50_ms"])
        assert is_number(attempts[way]["overhead_p99_ms"])
        drained = agent["end_to_end"][way]
        assert drained["routed_to"] == "bench_true" and drained["n"] > 0
        assert is_number(drained["agent_tasks_per_s"]) and drained["agent_tasks_per_s"] > 0
        assert analyzed(drained["statistics"], drained["n"])
    assert is_number(attempts["bare_fork_exec"]["p50_ms"])

    floor = doc["results"]["floor"]
    settings = floor["settings"]
    assert settings["queries"] == ["claim", "complete"]
    assert settings["claim_batch"] >= 1 and settings["claims_in_flight"] >= 1
    # One batch went through the public API first (to take the parameters), the floor the rest.
    assert floor["floor"]["n"] == n - min(settings["claim_batch"], n)
    assert is_number(floor["floor"]["floor_per_s"]) and floor["floor"]["claim_batches"] >= 1
    spent = floor["floor"]["machine_cpu_us_per_task"]  # what the statements cost a task
    assert is_number(spent) and spent > 0
    assert floor["drain"]["n"] == n and is_number(floor["fraction"])
    # One round of each with --smoke, reported as its median (every round's rate kept).
    assert floor["rounds"] == 1
    assert floor["floor"]["rounds_per_s"] == [floor["floor"]["floor_per_s"]]
    assert floor["drain"]["rounds_per_s"] == [floor["drain"]["drain_per_s"]]
    # Both sides of the fraction ran with planner statistics.
    assert analyzed(floor["floor"]["statistics"], n) and analyzed(floor["drain"]["statistics"], n)

    targets = {(t["benchmark"], t["figure"].split(":")[0]) for t in doc["targets"]}
    assert {
        ("routed", "routed / unrouted"),
        ("routed", "capped / unrouted"),
        ("routed", "p99, routed"),
        ("routed", "p50, capped"),
        ("agent", "attempt over fork+exec, p50"),
        ("floor", "drain / floor"),
    } <= targets
    assert "| floor | floor program" in done.stdout


def test_a_floor_too_small_for_its_claim_batch_fails_saying_so(
    bench_db: str, tmp_path: Path
) -> None:
    """The floor takes one claim batch through the public API for its statements' parameters:
    an N under two batches would leave it nothing to time, so it fails naming the N to give,
    rather than reporting a rate of nothing."""
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", "floor", "--n", "600",
         "--pg", bench_db, "--out", str(out), "--no-progress", "--no-peers"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    [error] = json.loads((out / "results.json").read_text())["errors"]
    assert "floor: N=600 is under two claim batches (500 each" in error
    assert "give --n 1000 or more" in error
