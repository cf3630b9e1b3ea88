"""``agentqueue bench --smoke`` runs every benchmark end to end and writes its report.

It runs as a subprocess against the test PostgreSQL server (``AGENTQUEUE_TEST_PG``), in a
database of its own. No speed is asserted: the figures only have to be there.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue.bench import BENCHMARKS

pytestmark = pytest.mark.postgres


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# routed, agent and floor have their own smoke run (tests/bench/test_paths_smoke.py).
OWN_SMOKE = {"routed", "agent", "floor"}
SMOKED = tuple(name for name in BENCHMARKS if name not in OWN_SMOKE)


def test_smoke_run_reports_every_benchmark(bench_db: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", *SMOKED, "--smoke", "--pg", bench_db,
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,  # a generous bound: the machines are shared
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    assert "| benchmark | system | figure | target | met? |" in done.stdout

    doc = json.loads((out / "results.json").read_text())
    assert doc["errors"] == []
    assert set(doc["results"]) == set(SMOKED)
    for name in SMOKED:
        figures = [r["value"] for r in doc["rows"] if r["benchmark"] == name]
        assert figures and any(is_number(v) for v in figures), f"{name} reported no figure"
    drain = doc["results"]["drain"]["systems"]
    for system in ("agentqueue-postgresql", "agentqueue-sqlite"):
        assert is_number(drain[system]["drain_per_s"]) and drain[system]["drain_per_s"] > 0
    admission = doc["results"]["admission"]
    for backend in ("postgresql", "sqlite"):
        sanity = admission["sanity"][backend]
        assert sanity["admission_on"] is True
        assert sanity["pending_after_preload_on"] == sanity["n"]
        assert sanity["pending_after_preload_off"] == 0
        assert sanity["drain_admit_off"]["admit_after_submit_ms"] == 0
        figures = admission["systems"][backend]
        for run in ("drain_off", "drain_on"):
            assert is_number(figures[run]["drain_per_s"]) and figures[run]["drain_per_s"] > 0
            assert len(figures[run]["rounds_per_s"]) == 1  # --smoke: one round each way
            # Planner statistics of the preload on PostgreSQL, as for the drain; none on SQLite.
            stats = figures[run]["statistics"]
            if backend == "sqlite":
                assert stats is None
            else:
                assert stats["last_analyze"] is not None and stats["reltuples"] == sanity["n"]
        for run in ("latency_off", "latency_on"):
            assert is_number(figures[run]["p99_ms"])
        assert is_number(figures["drain_ratio"])
    assert {"latency", "admission", "scaling", "cost"} <= {t["benchmark"] for t in doc["targets"]}
    assert all(t["met"] in (True, False, None) for t in doc["targets"])
    # The idle worker is watched once quiet: on SQLite it has given back the writer process it
    # started with (the worker command's), so on both it is one process; had the writer stayed,
    # its RSS would be added in, and the PSS of all is beside it.
    cost = doc["results"]["cost"]["systems"]
    for backend in ("sqlite", "postgresql"):
        idle = cost[backend]["idle"]
        assert idle["processes"] == 1, idle
        assert idle["peak_rss_mib"] >= idle["worker_peak_rss_mib"] > 0
        assert is_number(idle["pss_mib"]) and idle["pss_mib"] > 0
        assert is_number(idle["quiet_after_secs"])
    assert is_number(doc["machine"]["cores"]) and doc["machine"]["postgresql"]

    table = (out / "results.md").read_text()
    assert "| benchmark | system | figure | target | met? |" in table
    assert (out / "drain.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_settings_overrides_keep_the_drain_tuning() -> None:
    from agentqueue.bench.child import DRAIN_SETTINGS, with_overrides

    settings = with_overrides(DRAIN_SETTINGS, {"admission": {"max_active": 1000}})
    assert settings.admission_limited and settings.admission.max_active == 1000
    assert settings.worker == DRAIN_SETTINGS.worker
    assert with_overrides(DRAIN_SETTINGS, None) is DRAIN_SETTINGS


def test_admission_check_tells_a_later_admission_from_admit_at_submit() -> None:
    from agentqueue.bench.admission import admitted_later

    trail = {"admit_actor": "scheduler", "submit_actor": "bench", "submit_seq": 1, "admit_seq": 2}
    # Admitted as submitted, the admit event carries the submit time and the submitter.
    assert not admitted_later({**trail, "admit_after_submit_ms": 0.0})
    assert admitted_later({**trail, "admit_after_submit_ms": 3.5})
    # A worker's claim that admits (a global cap alone) is a later admission too.
    assert admitted_later({**trail, "admit_actor": "worker-1", "admit_after_submit_ms": 3.5})
    assert not admitted_later({**trail, "admit_actor": "bench", "admit_after_submit_ms": 3.5})
    assert not admitted_later({"task_id": None})


def test_api_smoke_run_reports_every_figure(bench_db: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "bench", "api", "--smoke", "--pg", bench_db,
         "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    doc = json.loads((out / "results.json").read_text())
    assert doc["errors"] == []
    api = doc["results"]["api"]
    single, bulk, get, wait = api["single"], api["bulk"], api["get"], api["wait"]
    assert set(single["api"]) == {"1", "2"}  # one server of 1 process, one of 2
    for figures in single["api"].values():
        assert figures["statuses"] == {"201": single["n"]} and figures["n"] == single["n"]
    assert single["python"]["n"] == single["n"] and bulk["python"]["n"] == bulk["n"]
    assert bulk["statuses"] == {"200": bulk["requests"]} and bulk["api"]["n"] == bulk["n"]
    assert get["statuses"] == {"200": get["n"]} and get["measured"] == get["n"]
    for figure in (
        single["api_per_s"], single["python_per_s"], single["ratio"], single["server_cpu_percent"],
        single["client_cpu_percent"], single["server_cpu_ms_per_request"],
        single["api"]["2"]["per_s"], bulk["api_per_s"], bulk["python_per_s"], bulk["ratio"],
        get["p50_ms"], get["p99_ms"], get["server_cpu_ms_per_request"],
    ):  # fmt: skip
        assert is_number(figure) and figure >= 0
    assert get["p50_ms"] <= get["p99_ms"]
    assert wait["trials"] == 3 and 0 < wait["p50_ms"] <= wait["p99_ms"] <= wait["max_ms"]
    targets = [t for t in doc["targets"] if t["benchmark"] == "api"]
    assert len(targets) == 4 and all(t["met"] in (True, False) for t in targets)


def test_rounds_split_every_task() -> None:
    from agentqueue.bench.api import _split
    from agentqueue.bench.common import rotated

    assert _split(10_000, 4) == [2500] * 4
    assert _split(10, 4) == [2, 2, 3, 3] and _split(3, 4) == [1, 1, 1]
    assert rotated([None, 1, 2], 1) == [1, 2, None]


def test_a_drain_of_several_rounds_is_reported_by_its_median_round() -> None:
    from agentqueue.bench.common import median_pass

    rounds = [
        {"drain_per_s": 900.0, "secs": 1},
        {"drain_per_s": 500.0, "secs": 2},
        {"drain_per_s": 700.0, "secs": 3},
    ]
    one = median_pass(rounds)
    # The median round's figures stand for the pass; every rate is kept, in the order run.
    assert one["drain_per_s"] == 700.0 and one["secs"] == 3
    assert one["rounds_per_s"] == [900.0, 500.0, 700.0]
    two = median_pass(rounds[:2])
    assert two["drain_per_s"] == 700.0 and two["secs"] == 2  # the lower of two stands
    # Another rate's rounds (the floor program's) by its own key.
    floors = [
        {"floor_per_s": 3.0, "secs": 1},
        {"floor_per_s": 1.0, "secs": 2},
        {"floor_per_s": 2.0, "secs": 3},
    ]
    by_floor = median_pass(floors, "floor_per_s")
    assert by_floor["floor_per_s"] == 2.0 and by_floor["secs"] == 3
    assert by_floor["rounds_per_s"] == [3.0, 1.0, 2.0]


def test_http_client_reads_answers_split_and_joined() -> None:
    from agentqueue.bench.httpload import Connection

    async def go() -> list[tuple[int, bytes]]:
        conn = Connection()
        sent: list[bytes] = []

        class Transport:
            def write(self, data: bytes) -> None:
                sent.append(data)

        conn.connection_made(Transport())  # type: ignore[arg-type]
        first = asyncio.ensure_future(conn.send(b"GET /a HTTP/1.1\r\n\r\n"))
        await asyncio.sleep(0)
        conn.data_received(b"HTTP/1.1 201 Created\r\ncontent-le")
        conn.data_received(b'ngth: 7\r\ncontent-type: application/json\r\n\r\n{"a":1')
        assert not first.done()
        conn.data_received(b"}")
        answers = [await first]
        second = asyncio.ensure_future(conn.send(b"GET /b HTTP/1.1\r\n\r\n"))
        await asyncio.sleep(0)
        conn.data_received(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}")
        answers.append(await second)
        assert sent == [b"GET /a HTTP/1.1\r\n\r\n", b"GET /b HTTP/1.1\r\n\r\n"]
        return answers

    assert asyncio.run(go()) == [(201, b'{"a":1}'), (404, b"{}")]


def test_the_capped_passes_cap_is_out_of_one_workers_reach() -> None:
    """The admission and routed benchmarks' cap measures what admitting costs only while one
    worker's slots, and the tasks whose outcomes it has not yet written (still executing in the
    store), cannot reach it: at the worker's own concurrency the cap held the drain back."""
    from agentqueue.bench.admission import MAX_ACTIVE
    from agentqueue.bench.common import Sizes
    from agentqueue.worker.tuning import ASYNC_CONCURRENCY

    assert Sizes().drain_concurrency == ASYNC_CONCURRENCY  # the benchmarks run the default
    assert 2 * Sizes().drain_concurrency <= MAX_ACTIVE


def test_the_children_start_from_cached_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's children run agentqueue as installed software runs, from cached bytecode
    (the peers' packages are compiled by pip): PYTHONDONTWRITEBYTECODE is dropped for them and
    agentqueue's modules are compiled first, so no start of agentqueue compiles its sources."""
    import importlib.util
    import os

    from agentqueue.bench import procs

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    source = Path(procs.__file__).resolve().parent.parent / "domain" / "waiting.py"
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.unlink(missing_ok=True)
    procs.cache_bytecode()
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert cached.exists() and cached.stat().st_mtime >= source.stat().st_mtime
