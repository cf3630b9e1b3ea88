"""Times every statement a process sends to SQLite, for ``benchmarks/statement_log.py
--sqlite``, which puts this folder first on the worker's PYTHONPATH (Python imports
``sitecustomize`` as it starts) and names the output file in ``AQ_SQLITE_STATEMENTS``.

Every ``sqlite3.connect`` of the process gets a connection whose ``execute`` is timed, each
statement's text with the wall time of its runs, added to the JSON file when the process exits
(the worker's writer process, ``?writer=process``, and the worker each add theirs). The
time is ``execute``'s: all of a write's work (with RETURNING too: SQLite makes every change at
the first step), and of a read only the work up to its first row. Without the variable nothing
is changed."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import sqlite3
import time
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
        # A worker writes SQLite from a process of its own, which exits first: the processes'
        # runs are added together in the one file, under a lock.
        with open(OUT, "a+") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.seek(0)
            text = out.read()
            runs: dict[str, list[float]] = json.loads(text) if text else {}
            for sql, secs in _runs.items():
                runs.setdefault(sql, []).extend(secs)
            out.seek(0)
            out.truncate()
            out.write(json.dumps(runs))
