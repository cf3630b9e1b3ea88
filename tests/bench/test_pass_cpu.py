"""``benchmarks/pass_cpu.py`` runs both of its passes end to end, on two source trees in turn,
and reports a CPU figure per task for each run and the medians' ratio. No speed is asserted:
the figures only have to be there, for every task moved."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "benchmarks" / "pass_cpu.py"
SRC = ROOT / "src"


@pytest.mark.parametrize(("what", "n", "moved"), [("routed", 1_050, 50), ("sqlite-claim", 60, 60)])
def test_each_pass_reports_its_cpu_per_task_for_every_run(
    what: str, n: int, moved: int, bench_db: str, tmp_path: Path
) -> None:
    """The routed pass leaves its first admission (1,000) out of the count."""
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "--what", what, "--n", str(n), "--rounds", "1",
         "--pg", bench_db, "--variant", f"A={SRC}", "--variant", f"B={SRC}"],
        capture_output=True,
        text=True,
        timeout=300,  # a generous bound: the machines are shared
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = re.findall(r"round 1 ([AB]): ([\d.]+) us CPU per task \(([\d,]+) tasks\)", done.stdout)
    assert [label for label, _, _ in runs] == ["A", "B"]
    for _, us, tasks in runs:
        assert float(us) > 0 and int(tasks.replace(",", "")) == moved
    assert re.search(r"^B/A: [\d.]+x the CPU per task$", done.stdout, re.M)
