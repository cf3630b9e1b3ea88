"""Times every statement a process sends to SQLite, for ``benchmarks/statement_log.py
--sqlite``, which puts this folder first on the worker's PYTHONPATH (Python imports
``sitecustomize`` as it starts) and names the output file in ``AQ_SQLITE_STATEMENTS``.

Every ``sqlite3.connect`` of the process gets a connection whose ``execute`` is timed, each
statement's text with the wall time of its runs, written as JSON when the process exits. The
time is ``execute``'s: all of a write's work (with RETURNING too: SQLite makes every change at
the first step), and of a read only the work up to its first row. Without the variable nothing
is changed."""

from __future__ import annotations

import atexit
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

OUT = os.environ.get("AQ_SQLITE_STATEMENTS")

if OUT:
    _runs: dict[str, list[float]] = {}

    class _Timed(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            began = time.perf_counter()
            try:
                return super().execute(sql, parameters)
            finally:
                _runs.setdefault(sql, []).append(time.perf_counter() - began)

    _connect = sqlite3.connect

    def _timed_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _Timed)
        return _connect(*args, **kwargs)

    sqlite3.connect = _timed_connect  # type: ignore[assignment]

    @atexit.register
    def _write() -> None:
        Path(OUT).write_text(json.dumps(_runs))
