"""``benchmarks/statement_log.py`` reads a PostgreSQL server log as the server writes it (with
``log_min_duration_statement = 0``): each statement's runs of the drain's database only, its
parse and bind added to its execute, the drain's own clock reads left out, and each claim
counted under the arrays it was sent (which executor asked), never the JSON ones."""

from __future__ import annotations

import importlib.util
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
