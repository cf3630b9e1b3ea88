"""Start-up with the collector off: how long the ``agentqueue`` command takes to start as it is
launched (``agentqueue.launch``: the cyclic collector off while the modules load) against the
same command entered without that (``agentqueue.cli.main`` called directly), in turn, in one
sitting. The launched side is ``python -m agentqueue.cli``, which loads the CLI package (click)
before the launcher turns the collector off; the installed ``agentqueue`` script turns it off
first, so it gains a little more than measured here.

Measured three ways, each the median of ``--runs`` runs of each variant, taken in turn: the
worker's time from its process start to its first claim (``agentqueue worker --app
agentqueue.bench.noop_app:queue`` on N preloaded tasks, PostgreSQL by default or ``--sqlite
FILE``: the first ``started_at`` the store recorded, less the time of the spawn), and the wall
time of ``agentqueue --help`` and of ``agentqueue list`` on a SQLite file of 100 tasks::

    .venv/bin/python benchmarks/startup_gc.py [--runs 9] [--n 500] [--sqlite FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import drain_ab  # noqa: E402

PLAIN = "import sys; from agentqueue.cli import main; sys.argv[0] = 'agentqueue'; main()"
VARIANTS = {
    "launched (collector off while starting)": ["-m", "agentqueue.cli"],
    "plain (collector on)": ["-c", PLAIN],
}


def first_claim_ms(entry: list[str], url: str, n: int, src: str = "src") -> float:
    """Spawn the worker by ``entry`` (the agentqueue of the tree ``src``) on ``n`` fresh
    tasks; ms from the spawn to the first claim it recorded."""
    env = drain_ab.prepare(src, None, None, url, n)
    spawned = time.time()
    proc = subprocess.Popen(
        [sys.executable, *entry, "worker", "--app", drain_ab.APP],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done, first, _ = asyncio.run(drain_ab._clock(url))
            if done >= n or proc.poll() is not None:
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if first is None:
        raise RuntimeError("the worker claimed nothing")
    return (first - spawned) * 1000


def wall_ms(entry: list[str], args: list[str], env: dict[str, str]) -> float:
    """Wall ms of one run of the command (which must succeed)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, *entry, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_startup_gc")
    parser.add_argument("--sqlite", metavar="FILE", help="the worker on a SQLite file instead")
    args = parser.parse_args()
    url = f"sqlite:///{Path(args.sqlite).resolve()}" if args.sqlite else args.pg
    os.chdir(HERE.parent)
    times: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        listed = f"sqlite:///{tmp}/list.db"
        drain_ab.prepare("src", None, None, listed, 100)
        env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src"), "AGENTQUEUE_DB": listed}
        env.pop("AGENTQUEUE_CONFIG", None)
        for run in range(args.runs):
            for name, entry in VARIANTS.items():
                got = times[name]
                got.setdefault("worker start -> first claim", []).append(
                    first_claim_ms(entry, url, args.n)
                )
                got.setdefault("agentqueue --help", []).append(wall_ms(entry, ["--help"], env))
                got.setdefault("agentqueue list (SQLite, 100 tasks)", []).append(
                    wall_ms(entry, ["list"], env)
                )
            print(f"run {run + 1} of {args.runs} done, load {os.getloadavg()[0]:.2f}",
                  file=sys.stderr)  # fmt: skip
    where = "SQLite" if args.sqlite else "PostgreSQL"
    print(f"medians of {args.runs} runs each, in turn; the worker on {where}, N={args.n}")
    print("| measure | " + " | ".join(VARIANTS) + " | ratio |")
    print("|---|" + "---|" * (len(VARIANTS) + 1))
    first, second = VARIANTS
    for measure in times[first]:
        a = statistics.median(times[first][measure])
        b = statistics.median(times[second][measure])
        print(f"| {measure} | {a:.0f} ms | {b:.0f} ms | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
