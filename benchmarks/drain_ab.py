"""Drain A/B: the drain of ``agentqueue bench drain`` (one ``agentqueue worker --app
agentqueue.bench.noop_app:queue`` process, default flags, PostgreSQL, N preloaded no-op tasks
with planner statistics), run for two or more source trees in alternation (A, B, A, B, ...) in
one sitting, so that a change is measured as a ratio against the load of the same minutes.

Each variant is ``LABEL=SRC`` where SRC is a directory holding the ``agentqueue`` package (for
example a ``git archive`` of a commit, unpacked; ``.`` is this checkout's ``src``). The
preload (migrations included) and the worker both run with that tree first on PYTHONPATH, so
each variant gets its own schema and code. ``LABEL=SRC+SQL`` also runs the file SQL after the
preload (before ANALYZE), for trying a schema change without a migration; ``LABEL=SRC@TOML``
runs the preload and the worker with that configuration file (``AGENTQUEUE_CONFIG``), for
comparing the drain under admission limits or with agents configured against the default.
``--workers K`` starts K worker processes on the same database instead of one (their CPU per
task is summed). ``--sqlite FILE`` drains a SQLite file instead (recreated for each run; no
ANALYZE, as the drain benchmark runs SQLite; no server CPU beside the worker's, whose process
does SQLite's work)::

    .venv/bin/python benchmarks/drain_ab.py --n 20000 --rounds 3 \\
        --variant A=/tmp/base/src --variant B=src
    .venv/bin/python benchmarks/drain_ab.py --variant off=src --variant capped=src@capped.toml

Prints one line per run (the rate from the worker's start to the last completion, the headline
of the drain benchmark, and from the first claim to the last completion; the CPU time per task
of the worker process and of the PostgreSQL server processes serving its connections, read
from /proc, so on a local server only) with the load average, then each variant's medians and
the ratio of every later variant's medians to the first's. On a shared machine the CPU times
move far less with the neighbours' load than the rates do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import parse_variants

APP = "agentqueue.bench.noop_app:queue"
HERE = Path(__file__).resolve()


def _sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for PostgreSQL)."""
    return Path(url.removeprefix("sqlite://")[1:]) if url.startswith("sqlite:") else None


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _sqlite_clock(path: Path) -> tuple[int, float | None, float | None]:
    """As _clock, from a SQLite file (its times are integer microseconds)."""
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        (done,) = conn.execute("SELECT count(*) FROM aq_tasks WHERE state = 'completed'").fetchone()
        first, last = conn.execute(
            "SELECT min(started_at), max(CASE WHEN state = 'completed' THEN finished_at END)"
            " FROM aq_tasks"
        ).fetchone()
    return int(done), None if first is None else first / 1e6, None if last is None else last / 1e6


async def _prepare(url: str, n: int, extra_sql: str | None) -> None:
    """A fresh database at ``url``: migrated, preloaded with ``n`` no-op tasks, analyzed
    (PostgreSQL; SQLite gathers no statistics by itself, and the drain benchmark gives it
    none)."""
    from agentqueue.bench.common import NOOP
    from agentqueue.bench.db import preload
    from agentqueue.queue import AsyncQueue
    from agentqueue.store.admin import drop_database, ensure_database, execute

    path = _sqlite_path(url)
    if path is None:
        await drop_database(url)
        await ensure_database(url)
    else:
        _remove_sqlite(path)
    queue = AsyncQueue(url, actor="bench")
    try:
        await queue.open()
        await preload(queue, n, NOOP)
    finally:
        await queue.close()
    if path is not None:
        if extra_sql:
            with contextlib.closing(sqlite3.connect(path)) as conn:
                conn.executescript(extra_sql)
        return
    if extra_sql:
        await execute(url, extra_sql)
    await execute(url, "ANALYZE")


async def _clock(url: str) -> tuple[int, float | None, float | None]:
    from agentqueue.store.admin import scalar

    path = _sqlite_path(url)
    if path is not None:
        return _sqlite_clock(path)
    done = await scalar(url, "SELECT count(*) FROM aq_tasks WHERE state = 'completed'")
    first = await scalar(url, "SELECT extract(epoch FROM min(started_at)) FROM aq_tasks")
    last = await scalar(
        url, "SELECT extract(epoch FROM max(finished_at)) FROM aq_tasks WHERE state = 'completed'"
    )
    return int(done), None if first is None else float(first), None if last is None else float(last)


async def _backends(url: str) -> list[int]:
    """The server processes of the other connections to the database (the worker's; none for
    SQLite, whose work is the worker process's own)."""
    from agentqueue.store.admin import scalar

    if _sqlite_path(url) is not None:
        return []

    pids = await scalar(
        url,
        "SELECT string_agg(pid::text, ',') FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    return [int(p) for p in str(pids or "").split(",") if p]


def _cpu_secs(pid: int) -> float:
    """User and system CPU of a local process so far (0 if it is gone or not readable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _env(src: str, config: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(src).resolve())
    env.pop("AGENTQUEUE_CONFIG", None)
    if config:
        env["AGENTQUEUE_CONFIG"] = str(Path(config).resolve())
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_one(
    label: str,
    src: str,
    extra_sql: str | None,
    config: str | None,
    url: str,
    n: int,
    workers: int = 1,
) -> dict[str, object]:
    """Prepare, start the worker(s), wait for all ``n`` completed, stop them; the clocks."""
    env = prepare(src, extra_sql, config, url, n)
    return {"label": label, **drain(env, url, n, workers=workers)}


def prepare(
    src: str, extra_sql: str | None, config: str | None, url: str, n: int
) -> dict[str, str]:
    """A fresh database at ``url`` with ``n`` no-op tasks, prepared by the tree ``src`` (in a
    process of its own); the environment its worker runs in."""
    env = _env(src, config)
    prep = [sys.executable, str(HERE), "--prepare", url, "--n", str(n)]
    if extra_sql:
        prep += ["--extra-sql", extra_sql]
    subprocess.run(prep, env=env, check=True)
    env["AQ_BENCH_APP_DB"] = url
    return env


def drain(
    env: dict[str, str],
    url: str,
    n: int,
    feed: Callable[[], object] | None = None,
    workers: int = 1,
) -> dict[str, object]:
    """Start the worker (``workers`` alike, on the same database), wait for all ``n``
    completed, stop it; the clocks. ``feed``, when given, runs once the worker has started (it
    submits the tasks a run without a preload drains)."""
    load_before = os.getloadavg()[0]
    spawned = time.time()
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "agentqueue.cli", "worker", "--app", APP],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    db_cpu = 0.0
    try:
        if feed is not None:
            feed()
        deadline = time.monotonic() + max(120.0, n / 20)
        while True:
            done, _, _ = asyncio.run(_clock(url))
            gone = any(w.poll() is not None for w in started)
            if done >= n or gone or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        # PostgreSQL's side: the CPU of the worker's connections, read before it closes them
        # (local servers only; 0 where /proc shows none of them).
        db_cpu = sum(_cpu_secs(pid) for pid in asyncio.run(_backends(url)))
    finally:
        for worker in started:
            worker.send_signal(signal.SIGTERM)
        worker_cpu = sum(_reap(worker) for worker in started)
    done, first, last = asyncio.run(_clock(url))
    out: dict[str, object] = {"done": done, "load": load_before}
    if done == n and first is not None and last is not None:
        out["per_s"] = n / (last - spawned)
        out["claim_to_done_per_s"] = n / (last - first)
        out["worker_us"] = worker_cpu / n * 1e6
        out["db_us"] = db_cpu / n * 1e6
    return out


def _reap(proc: subprocess.Popen[bytes]) -> float:
    """Wait for the worker to exit (killed after 30 s); its user and system CPU seconds."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = 0
            return float(usage.ru_utime + usage.ru_stime)
        time.sleep(0.05)
    proc.kill()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = -9
    return float(usage.ru_utime + usage.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[], help="LABEL=SRC[+SQL][@TOML]")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes draining the same database (default 1); the CPU per task is"
        " theirs together",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_drain_ab")
    parser.add_argument(
        "--sqlite",
        metavar="FILE",
        help="drain a SQLite file instead of PostgreSQL (recreated each run; its CPU is the"
        " worker's own)",
    )
    parser.add_argument("--prepare", help=argparse.SUPPRESS)
    parser.add_argument("--extra-sql", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        sql = Path(args.extra_sql).read_text() if args.extra_sql else None
        asyncio.run(_prepare(args.prepare, args.n, sql))
        return
    variants = []
    for variant in parse_variants(parser, args.variant, suffixes="+@"):
        rest, _, config = variant.rest.partition("@")
        sql = rest.removeprefix("+")
        variants.append((variant.label, variant.src, sql or None, config or None))
    results: dict[str, list[dict[str, object]]] = {v[0]: [] for v in variants}
    url = f"sqlite:///{Path(args.sqlite).resolve()}" if args.sqlite else args.pg
    print(f"N={args.n:,}, {args.rounds} rounds, {'SQLite' if args.sqlite else 'PostgreSQL'} {url}")

    def server(us: float, unit: str = "us") -> str:
        """PostgreSQL's share beside the worker's (SQLite's work is the worker process's)."""
        return "" if args.sqlite else f", PostgreSQL {us:.{2 if unit == 'x' else 0}f} {unit}"

    for r in range(args.rounds):
        for label, src, sql, config in variants:
            res = run_one(label, src, sql, config, url, args.n, args.workers)
            results[label].append(res)
            per_s = res.get("per_s")
            c2d = res.get("claim_to_done_per_s")
            shown = (
                "failed"
                if per_s is None
                else f"{per_s:,.0f}/s (claim to done {c2d:,.0f}/s), CPU per task: worker "
                f"{res['worker_us']:.0f} us{server(float(res['db_us']))}"  # type: ignore[arg-type]
            )
            print(
                f"round {r + 1} {label}: {shown}, load {res['load']:.2f}",
                flush=True,
            )
    medians: dict[str, tuple[float, ...]] = {}
    for label, runs in results.items():
        rates = [float(x["per_s"]) for x in runs if "per_s" in x]  # type: ignore[arg-type]
        c2d = [float(x["claim_to_done_per_s"]) for x in runs if "per_s" in x]  # type: ignore[arg-type]
        worker = [float(x["worker_us"]) for x in runs if "per_s" in x]  # type: ignore[arg-type]
        db = [float(x["db_us"]) for x in runs if "per_s" in x]  # type: ignore[arg-type]
        if rates:
            medians[label] = tuple(statistics.median(v) for v in (rates, c2d, worker, db))
            m = medians[label]
            print(
                f"{label}: median {m[0]:,.0f}/s (claim to done {m[1]:,.0f}/s), CPU per task:"
                f" worker {m[2]:.0f} us{server(m[3])}, over {len(rates)} runs"
            )
    first = variants[0][0]
    for label in list(medians)[1:]:
        if first in medians:
            a, b = medians[first], medians[label]
            print(
                f"{label}/{first}: rate {b[0] / a[0]:.2f}x (claim to done {b[1] / a[1]:.2f}x);"
                f" CPU per task: worker {b[2] / a[2]:.2f}x"
                f"{server(b[3] / a[3] if a[3] else float('nan'), 'x')}"
            )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
