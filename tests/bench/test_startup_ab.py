"""``benchmarks/startup_ab.py`` on the smallest sizes: two trees (here the same one, twice) each
get both commands timed in every round, and the table gives each variant's medians with their
ratio to the first's. No speed is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_startup_ab_times_both_commands_of_each_tree(tmp_path: Path) -> None:
    src = str(ROOT / "src")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "startup_ab.py"), "--variant", f"A={src}",
         "--variant", f"B={src}", "--runs", "1", "--rounds", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    out = done.stdout
    assert len(re.findall(r"^round \d+: A --help \d+, A list \d+, B --help \d+, B list \d+ ms",
                          out, re.M)) == 2, out  # fmt: skip
    rows = re.findall(r"^\| (A|B) \| `(--help|list)` \| (\d+) \| (\d+) \| ([\d.]+)x \|", out, re.M)
    assert sorted((v, c) for v, c, *_ in rows) == [
        ("A", "--help"), ("A", "list"), ("B", "--help"), ("B", "list")
    ], out  # fmt: skip
    assert all(int(wall) > 0 for *_, wall, _, _ in rows)
    assert [ratio for v, _, _, _, ratio in rows if v == "A"] == ["1.00", "1.00"]
