"""Statement log: every statement one drain sends to PostgreSQL, added up.

One drain as ``benchmarks/drain_ab.py`` runs it (N no-op tasks preloaded by the tree ``--src``,
ANALYZE, then one ``agentqueue worker --app agentqueue.bench.noop_app:queue`` process, with the
configuration file ``--config`` if given: agents, a cap), with ``log_min_duration_statement = 0``
set on the drain's database alone (``ALTER DATABASE``, after the preload; reset at the end). The
server's log is then read back where it is written (a local server: ``--log FILE``, by default
the one file ``/var/log/postgresql/postgresql-*-main.log``), and printed: each statement (its
first words), how often it ran, the sum of its logged durations (parse, bind and execute), the
median and the largest of its runs, most time first; then the claims grouped by the arrays they
were sent (task types, agents, paused types: a worker claims for each of its executors)::

    .venv/bin/python benchmarks/statement_log.py [--n 20000] [--config CFG.toml] [--src DIR]
    .venv/bin/python benchmarks/statement_log.py --every 0.05 --n 50 [--config CFG.toml]

With ``--sqlite FILE`` the drain is of a SQLite file instead (recreated), and its statements
are timed in the worker process itself (``benchmarks/sqlite_statements/sitecustomize.py``:
each statement's ``execute``, in the thread that sends it; the writer's statements are the
file's write lock held)::

    .venv/bin/python benchmarks/statement_log.py --sqlite /tmp/drain.db [--n 20000]

With ``--every SECS`` there is no preload: the worker starts on an empty queue and, once it is
idle, N tasks are submitted one at a time, one every SECS (the dispatch latency benchmark's
path; the submits' own statements are in the log too).

The durations are wall time in the server, with the logging's own cost and every wait for a
lock in them: a map of where the server's time goes and of what is sent that need not be, not a
speed figure (``drain_ab.py`` and ``agentqueue bench`` give those).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain_ab  # the drain it measures is drain_ab's

ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[(\d+)\] (\S*)@(\S*) ", re.M)
DURATION = re.compile(r"duration: ([\d.]+) ms\s+(statement|parse|bind|execute)[^:]*: (.*)", re.S)
ARRAY = re.compile(r"'(\{[^']*\})'")
CLAIMS = ("WITH picked AS", "WITH room AS")
"""How the claim statements begin (claim, and claim_admitting under a cap alone)."""
HARNESS = (
    "SELECT count(*) FROM aq_tasks WHERE state = 'completed'",
    "SELECT extract(epoch FROM",
    "SELECT string_agg(pid::text, ',') FROM pg_stat_activity",
)
"""How the drain's own clock and CPU reads begin (drain_ab): left out."""


def default_log() -> str:
    found = glob.glob("/var/log/postgresql/postgresql-*-main.log")
    if len(found) != 1:
        raise SystemExit(f"give --log FILE: the server's log is not one of {found or 'none'}")
    return found[0]


def entries(text: str, database: str) -> list[tuple[str, str]]:
    """(backend pid, the rest) of each log entry of ``database``, in order."""
    marks = list(ENTRY.finditer(text))
    out = []
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        if mark.group(3) == database:
            end = after.start() if after is not None else len(text)
            out.append((mark.group(1), text[mark.end() : end]))
    return out


def summarize(
    found: list[tuple[str, str]], planned: dict[str, list[float]] | None = None
) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """Durations by statement (sum of every phase per run, runs counted by their execute or
    simple statement), and the claims' by their array parameters; with ``planned``, each run's
    parse and bind (where PostgreSQL plans a prepared statement) added there too."""
    runs: dict[str, list[float]] = defaultdict(list)
    claims: dict[str, list[float]] = defaultdict(list)
    pending: dict[str, float] = defaultdict(float)  # parse and bind, until their execute
    for i, (pid, body) in enumerate(found):
        m = DURATION.search(body)
        if m is None:
            continue
        ms, phase, sql = float(m.group(1)), m.group(2), " ".join(m.group(3).split())
        if sql.startswith(HARNESS):
            continue
        key = sql[:90]
        if phase in ("parse", "bind"):
            pending[f"{pid} {key}"] += ms
            continue
        before = pending.pop(f"{pid} {key}", 0.0)
        took = ms + before
        runs[key].append(took)
        if planned is not None:
            planned.setdefault(key, []).append(before)
        if sql.startswith(CLAIMS):
            later = found[i + 1 : i + 6]
            params = next((b for p, b in later if p == pid and "parameters" in b), "")
            arrays = [a for a in ARRAY.findall(params) if '":' not in a]  # not the JSON ones
            claims[" ".join(arrays) or "(no array)"].append(took)
    return runs, claims, sum(len(v) for v in runs.values())


def sqlite_runs(
    src: str, config: str | None, path: Path, n: int
) -> tuple[dict[str, list[float]], dict[str, object]]:
    """A drain of a SQLite file with every statement of the worker timed in the worker (ms,
    by the statement's first words), and the drain's clocks."""
    url = f"sqlite:///{path.resolve()}"
    env = drain_ab.prepare(src, None, config, url, n)
    out = path.with_name(f"{path.name}.statements.json")
    out.unlink(missing_ok=True)
    timing = Path(__file__).resolve().parent / "sqlite_statements"
    env["PYTHONPATH"] = f"{timing}{os.pathsep}{env['PYTHONPATH']}"
    env["AQ_SQLITE_STATEMENTS"] = str(out)
    result = drain_ab.drain(env, url, n)
    runs: dict[str, list[float]] = defaultdict(list)
    for sql, secs in json.loads(out.read_text()).items():
        runs[" ".join(sql.split())[:90]].extend(s * 1000 for s in secs)
    return runs, result


def trickle(env: dict[str, str], url: str, n: int, every: float) -> dict[str, object]:
    """The drain of ``n`` tasks submitted one every ``every`` seconds (in a process of the
    tree's own) once the worker, started on the empty queue, is idle."""
    submit = [sys.executable, __file__, "--submit", url, "--n", str(n), "--every", str(every)]

    def feed() -> None:
        time.sleep(2.0)  # started and idle
        subprocess.run(submit, env=env, check=True)

    return drain_ab.drain(env, url, n, feed)


async def _submit(url: str, n: int, every: float) -> None:
    from agentqueue.bench.common import NOOP
    from agentqueue.queue import AsyncQueue

    queue = AsyncQueue(url, actor="bench")
    try:
        await queue.open()
        begin = time.monotonic()
        for i in range(n):
            await asyncio.sleep(max(0.0, begin + i * every - time.monotonic()))
            await queue.submit(title="statement log", task_type=NOOP)
    finally:
        await queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_statement_log")
    parser.add_argument("--src", default="src", help="the tree to run (default: this checkout's)")
    parser.add_argument("--config", help="a configuration file for the preload and the worker")
    parser.add_argument("--log", help="the server's log file (default: the local cluster's)")
    parser.add_argument("--top", type=int, default=15, help="statements shown")
    parser.add_argument("--every", type=float, help="no preload: submit N, one every SECS")
    parser.add_argument("--sqlite", metavar="FILE", help="drain a SQLite file instead")
    parser.add_argument("--submit", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.submit:
        asyncio.run(_submit(args.submit, args.n, args.every))
        return
    if args.sqlite:
        runs, result = sqlite_runs(args.src, args.config, Path(args.sqlite), args.n)
        rate = result.get("per_s")
        shown = f"{rate:,.0f}/s with every statement timed" if rate else "the drain failed"
        total = sum(len(v) for v in runs.values())
        print(f"N={args.n:,}, tree {args.src}, SQLite {args.sqlite}: {shown}; {total:,} runs")
        table(runs, args.top)
        return
    log = Path(args.log or default_log())
    from agentqueue.store.admin import dbname, execute

    database = dbname(args.pg)

    env = drain_ab.prepare(args.src, None, args.config, args.pg, 0 if args.every else args.n)
    asyncio.run(execute(args.pg, f'ALTER DATABASE "{database}" SET log_min_duration_statement = 0'))
    start = log.stat().st_size
    try:
        if args.every:
            result = trickle(env, args.pg, args.n, args.every)
        else:
            result = drain_ab.drain(env, args.pg, args.n)
    finally:
        asyncio.run(
            execute(args.pg, f'ALTER DATABASE "{database}" RESET log_min_duration_statement')
        )
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    planned: dict[str, list[float]] = {}
    runs, claims, total = summarize(entries(text, database), planned)
    rate, done = result.get("per_s"), result.get("done")
    if args.every:
        shown = f"one submit every {args.every:g} s, {done} of {args.n} completed"
    else:
        shown = f"{rate:,.0f}/s with every statement logged" if rate else "the drain failed"
    print(f"N={args.n:,}, tree {args.src}, config {args.config or 'none'}: {shown}; {total:,} runs")
    table(runs, args.top, planned)
    print("\nClaims by the arrays they were sent (task types, agents, paused types):")
    print("| arrays | claims | total ms | median ms |")
    print("|---|---|---|---|")
    for arrays, took in sorted(claims.items(), key=lambda kv: -len(kv[1])):
        print(f"| {arrays} | {len(took)} | {sum(took):,.1f} | {statistics.median(took):.2f} |")


def table(
    runs: dict[str, list[float]], top: int, planned: dict[str, list[float]] | None = None
) -> None:
    """The statements by their total time, most first; with ``planned`` (PostgreSQL), the
    median of their parse and bind (where a prepared statement is planned) beside the whole's."""
    split = planned is not None
    print(
        "| statement | runs | total ms | median ms |"
        + (" of it parse + bind, median ms |" if split else "")
        + " max ms |"
    )
    print("|---|---|---|---|" + ("---|" if split else "") + "---|")
    for key, values in sorted(runs.items(), key=lambda kv: -sum(kv[1]))[:top]:
        parts = [f"`{key}`", f"{len(values)}", f"{sum(values):,.1f}"]
        parts.append(f"{statistics.median(values):.2f}")
        if planned is not None:
            parts.append(f"{statistics.median(planned.get(key) or [0.0]):.2f}")
        parts.append(f"{max(values):.2f}")
        print("| " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
