"""``agentqueue bench --smoke`` runs every benchmark end to end and writes its report.

It runs as a subprocess against the test PostgreSQL server (``AGENTQUEUE_TEST_PG``), in a
database of its own. No speed is asserted: the figures only have to be there.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentqueue.bench import BENCHMARKS

PG_SERVER = os.environ.get("AGENTQUEUE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

pytestmark = pytest.mark.postgres


@pytest.fixture
def bench_db() -> Iterator[str]:
    """The URL of a database for the run (the bench creates it); dropped afterwards."""
    name = f"aq_bench_smoke_{os.getpid()}"
    base, _, _ = PG_SERVER.rpartition("/")
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    yield f"{base}/{name}"
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_smoke_run_reports_every_benchmark(bench_db: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", "--smoke", "--pg", bench_db,
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    assert "| benchmark | system | figure | target | met? |" in done.stdout

    doc = json.loads((out / "results.json").read_text())
    assert doc["errors"] == []
    assert set(doc["results"]) == set(BENCHMARKS)
    for name in BENCHMARKS:
        figures = [r["value"] for r in doc["rows"] if r["benchmark"] == name]
        assert figures and any(is_number(v) for v in figures), f"{name} reported no figure"
    drain = doc["results"]["drain"]["systems"]
    for system in ("agentqueue-postgresql", "agentqueue-sqlite"):
        assert is_number(drain[system]["drain_per_s"]) and drain[system]["drain_per_s"] > 0
    assert {"latency", "scaling", "cost"} <= {t["benchmark"] for t in doc["targets"]}
    assert all(t["met"] in (True, False, None) for t in doc["targets"])
    assert is_number(doc["machine"]["cores"]) and doc["machine"]["postgresql"]

    table = (out / "results.md").read_text()
    assert "| benchmark | system | figure | target | met? |" in table
    assert (out / "drain.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
