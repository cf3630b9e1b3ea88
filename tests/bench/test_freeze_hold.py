"""``benchmarks/freeze_hold.py`` on a tiny drain: the hook it loads into the worker times the
worker's one freeze of its startup heap, and every round of each tree prints that hold beside
its drain, the table each variant's medians. No speed is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def test_freeze_hold_times_the_freeze_of_each_trees_worker(bench_db: str, tmp_path: Path) -> None:
    src = str(ROOT / "src")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "freeze_hold.py"), "--variant", f"A={src}",
         "--variant", f"B={src}", "--n", "300", "--rounds", "1", "--pg", bench_db],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    rounds = re.findall(r"^round 1 (A|B): freeze held the loop ([\d.]+) ms; [\d,]+/s", done.stdout,
                        re.M)  # fmt: skip
    assert [label for label, _ in rounds] == ["A", "B"], done.stdout
    rows = re.findall(r"^\| (A|B) \| ([\d.]+) \| [\d,]+ \| [\d,]+ \| \d+ \| ([\d.]+)x \|$",
                      done.stdout, re.M)  # fmt: skip
    assert [label for label, _, _ in rows] == ["A", "B"], done.stdout
    assert rows[0][2] == "1.00"
