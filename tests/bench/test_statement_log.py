"""``benchmarks/statement_log.py`` reads a PostgreSQL server log as the server writes it (with
``log_min_duration_statement = 0``): each statement's runs of the drain's database only, its
parse and bind added to its execute, the drain's own clock reads left out, and each claim
counted under the arrays it was sent (which executor asked), never the JSON ones. With
``--sqlite`` it times each statement a SQLite drain's worker sends, in the worker itself."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _program() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "statement_log", ROOT / "benchmarks" / "statement_log.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


P = "2026-12-04 16:39:37.4{} UTC [{}] postgres@{} LOG:  duration: {} ms  "
LOG = "\n".join(
    [
        P.format("10", 7, "aq_log", "0.50") + "parse _pg3_0: WITH picked AS (",
        "\tSELECT t.ctid FROM aq_tasks",
        P.format("11", 7, "aq_log", "0.25") + "bind _pg3_0: WITH picked AS (",
        "\tSELECT t.ctid FROM aq_tasks",
        P.format("12", 7, "aq_log", "3.00") + "execute _pg3_0: WITH picked AS (",
        "\tSELECT t.ctid FROM aq_tasks",
        "2026-12-04 16:39:37.412 UTC [7] postgres@aq_log DETAIL:  parameters: $1 = 'w',"
        " $2 = '{noop}', $3 = '{}', $4 = '{\"worker\":\"w\"}'",
        P.format("13", 8, "aq_log", "2.00") + "execute _pg3_0: WITH picked AS (",
        "\tSELECT t.ctid FROM aq_tasks",
        "2026-12-04 16:39:37.413 UTC [8] postgres@aq_log DETAIL:  parameters: $1 = 'w',"
        " $2 = '{t_a1}', $3 = '{a1}', $4 = '{\"worker\":\"w\"}'",
        P.format("14", 7, "aq_log", "1.00") + "execute _pg3_0: WITH picked AS (",
        "\tSELECT t.ctid FROM aq_tasks",
        "2026-12-04 16:39:37.414 UTC [7] postgres@aq_log DETAIL:  parameters: $1 = 'w',"
        " $2 = '{noop}', $3 = '{}', $4 = '{\"worker\":\"w\"}'",
        P.format("15", 9, "aq_log", "9.00")
        + "statement: SELECT count(*) FROM aq_tasks WHERE state = 'completed'",
        P.format("16", 9, "other", "5.00") + "statement: COMMIT",
        P.format("17", 7, "aq_log", "0.10") + "statement: COMMIT",
    ]
)


def test_the_log_is_read_per_statement_and_per_executor() -> None:
    program = _program()
    runs, claims, total = program.summarize(program.entries(LOG, "aq_log"))
    claim = "WITH picked AS ( SELECT t.ctid FROM aq_tasks"
    assert runs == {claim: [3.75, 2.0, 1.0], "COMMIT": [0.1]}  # parse + bind + execute
    assert total == 4  # the clock read and the other database's COMMIT left out
    assert claims == {"{noop} {}": [3.75, 1.0], "{t_a1} {a1}": [2.0]}


def test_each_runs_parse_and_bind_are_kept_apart_when_asked() -> None:
    """Where a prepared statement is planned (its parse and bind) is told apart from the whole,
    per run: a run without them (a prepared statement's plan reused) counts none."""
    program = _program()
    planned: dict[str, list[float]] = {}
    program.summarize(program.entries(LOG, "aq_log"), planned)
    claim = "WITH picked AS ( SELECT t.ctid FROM aq_tasks"
    assert planned == {claim: [0.75, 0.0, 0.0], "COMMIT": [0.0]}


TIMED = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t (x INTEGER)")
for i in range(3):
    conn.execute("INSERT INTO t (x) VALUES (?)", (i,))
print(type(conn).__name__, conn.execute("SELECT sum(x) FROM t").fetchone()[0])
"""


def _run_timed(tmp_path: Path, env_out: Path | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AQ_SQLITE_STATEMENTS"}
    env["PYTHONPATH"] = str(ROOT / "benchmarks" / "sqlite_statements")
    if env_out is not None:
        env["AQ_SQLITE_STATEMENTS"] = str(env_out)
    done = subprocess.run(
        [sys.executable, "-c", TIMED, str(tmp_path / "t.db")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_the_sqlite_statements_of_a_process_are_timed_as_it_exits(tmp_path: Path) -> None:
    out = tmp_path / "statements.json"
    # The answers are the same: only the time of each execute is taken.
    assert _run_timed(tmp_path, out) == "_Timed 3"
    runs = json.loads(out.read_text())
    assert sorted((sql, len(secs)) for sql, secs in runs.items()) == [
        ("CREATE TABLE t (x INTEGER)", 1),
        ("INSERT INTO t (x) VALUES (?)", 3),
        ("SELECT sum(x) FROM t", 1),
    ]
    assert all(s >= 0 for secs in runs.values() for s in secs)


def test_each_process_adds_its_runs_to_the_file(tmp_path: Path) -> None:
    # A worker and its writer process each write theirs as they exit: neither overwrites.
    out = tmp_path / "statements.json"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _run_timed(tmp_path / name, out)
    runs = json.loads(out.read_text())
    assert len(runs["INSERT INTO t (x) VALUES (?)"]) == 6


def test_without_its_variable_sqlite_is_left_alone(tmp_path: Path) -> None:
    assert _run_timed(tmp_path, None) == "Connection 3"
