"""``benchmarks/dispatch_steps.py``, ``benchmarks/candidate_plans.py``,
``benchmarks/anchor_stall.py`` and ``benchmarks/idle_round_trip.py`` on tiny sizes: each runs
against the real PostgreSQL (and SQLite) and prints what it promises (every step of each way's
dispatch with a figure, and the routed way's admission passes; each variant's plan under each
plan cache mode, with its times, and the plan the store runs; each way's anchoring steps with
the loop's delays; each way's round trips). No speed is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=600,  # a generous bound: the machines are shared
        cwd=cwd,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    return done.stdout


def test_dispatch_steps_gives_every_step_of_each_way(bench_db: str, tmp_path: Path) -> None:
    """One variant (this checkout's tree, labelled): each way's steps, then the routed way's
    admission passes, those that admitted each with its round trips and length."""
    program = str(ROOT / "benchmarks" / "dispatch_steps.py")
    out = _run(program, "--n", "5", "--every", "0.05", "--rounds", "1", "--pg", bench_db,
               "--work-dir", str(tmp_path / "steps"), "--variant", f"here={ROOT / 'src'}",
               cwd=tmp_path)  # fmt: skip
    steps, _, passes = out.partition("Routed: the admission passes")
    assert "| step | here unrouted 1 | here routed 1 |" in steps
    rows = {
        cells[0]: cells[1:]
        for line in steps.splitlines()
        if line.startswith("| ") and not line.startswith("| step")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    figures = {
        (cells[0], cells[1]): cells[2]
        for line in passes.splitlines()
        if line.startswith(("| admitting", "| empty"))
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert 1 <= int(figures[("admitting", "passes")]) <= 5  # a pass may admit two
    for what in ("first round trip", "writes", "the whole pass"):
        (key,) = [k for k in figures if k[0] == "admitting" and k[1].startswith(what)]
        assert re.match(r"^\d+\.\d\d$", figures[key]), figures
    number = re.compile(r"^\d+\.\d\d$")
    # Columns: unrouted, routed. Each way's steps have a figure; the other way's are blank.
    for step in ("the submit's notice reaches the worker", "the handler began"):
        assert all(number.match(c) for c in rows[step]), rows[step]
    for step in ("the claimer's claim sent", "the claim back (committed)"):
        assert number.match(rows[step][0]) and rows[step][1] == "", rows[step]
    for step in (
        "the admission pass starts",
        "its first round trip back (lock, candidates, load, tenants)",
        "the plan made, the admission's writes being sent",
        "the admission and its claim committed",
    ):
        assert rows[step][0] == "" and number.match(rows[step][1]), rows[step]
    began = [float(c) for c in rows["the handler began"]]
    heard = [float(c) for c in rows["the submit's notice reaches the worker"]]
    assert all(h <= b for h, b in zip(heard, began, strict=True))  # in order of a dispatch


def test_candidate_plans_shows_each_variant_under_each_mode(bench_db: str, tmp_path: Path) -> None:
    out = _run(str(ROOT / "benchmarks" / "candidate_plans.py"), "--n", "3000", "--pg", bench_db,
               cwd=tmp_path)  # fmt: skip
    heads = re.findall(r"^--- (.+), plan_cache_mode = (\w+)$", out, re.M)
    variants = ["as shipped", "the limit a constant",
                "the limit a constant, the tenants in a subquery"]  # fmt: skip
    modes = ["force_custom_plan", "force_generic_plan", "auto"]
    assert heads == [(v, m) for v in variants for m in modes]
    for block in out.split("--- ")[1:]:
        assert "Planning Time:" in block and "Execution Time:" in block, block
        assert "aq_tasks" in block, block  # the plan's read of the table is shown
    # Last, the statement as the store runs it: its fixed plan walks the tenant index in order.
    fixed = out.split("--- as shipped, as the store runs it (after fixed_plan)\n")[1]
    assert "Index Scan using aq_tasks_pending_tenant" in fixed, fixed
    assert "Sort" not in fixed and "Bitmap" not in fixed and "Functions" not in fixed, fixed


def test_anchor_stall_gives_each_way_of_each_backend_its_steps(
    bench_db: str, tmp_path: Path
) -> None:
    """Four steps of 1,000 numbers a backend, two each way (the program stops if a step covers
    any other count; pages of 300 end inside it), each row with its three figures."""
    program = str(ROOT / "benchmarks" / "anchor_stall.py")
    out = _run(program, "--n", "4000", "--step", "1000", "--page", "300", "--pg", bench_db,
               cwd=tmp_path)  # fmt: skip
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith(("| postgresql", "| sqlite"))
    ]
    assert [r[:2] for r in rows] == [
        ["postgresql", "one page (1,000)"],
        ["postgresql", "paged (300)"],
        ["sqlite", "one page (1,000)"],
        ["sqlite", "paged (300)"],
    ]
    for row in rows:
        assert row[2] == "2" and all(re.match(r"^\d+(\.\d)?$", c) for c in row[3:]), row


def test_idle_round_trip_gives_each_way_its_figures(bench_db: str, tmp_path: Path) -> None:
    """Every way of sending the claim (and the bare statement's two) gets a median and a 90th
    percentile, each round and in the table, on tasks really claimed (the program stops if a
    claim comes back empty)."""
    out = _run(str(ROOT / "benchmarks" / "idle_round_trip.py"), "--n", "5", "--rounds", "1",
               "--every", "0.01", "--later", "0.002", "--pg", bench_db, cwd=tmp_path)  # fmt: skip
    ways = [
        "claim, back to back",
        "claim on notice",
        "claim on notice, 2 ms later",
        "SELECT 1 right after another",
        "SELECT 1 after 10 ms idle",
    ]
    rows = re.findall(r"^\| (.+?) \| (\d+\.\d{3}) \| (\d+\.\d{3}) \|$", out, re.M)
    assert [way for way, _, _ in rows] == ways, out
    assert all(float(p50) > 0 and float(p90) >= float(p50) for _, p50, p90 in rows), out
    assert len(re.findall(r"^round 1: ", out, re.M)) == 1, out
