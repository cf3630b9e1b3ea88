"""First claim A/B: how long ``agentqueue worker --app agentqueue.bench.noop_app:queue`` takes from
its process start to its first claim, for two or more source trees in turn, in one sitting (the
drain's headline clock starts at the process start, so this is the part of it a change to the
start-up moves). Each variant is ``LABEL=SRC`` as in ``drain_ab.py``; N tasks are preloaded
afresh for each run, PostgreSQL by default or ``--sqlite FILE``::

    .venv/bin/python benchmarks/first_claim_ab.py --sqlite /tmp/fc.db --runs 15 \\
        --variant before=/tmp/base/src --variant after=src

Prints each variant's median and quartiles, and the ratio of every later variant's median to
the first's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import startup_gc  # noqa: E402
from variants import parse_variants  # noqa: E402

ENTRY = ["-m", "agentqueue.cli"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, metavar="LABEL=SRC")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_first_claim")
    parser.add_argument("--sqlite", metavar="FILE", help="the worker on a SQLite file instead")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs must be at least 2 (quartiles are reported)")
    variants = {v.label: v.src for v in parse_variants(parser, args.variant, at_least=1)}
    url = f"sqlite:///{Path(args.sqlite).resolve()}" if args.sqlite else args.pg
    os.chdir(HERE.parent)
    times: dict[str, list[float]] = {label: [] for label in variants}
    for run in range(args.runs):
        for label, src in variants.items():
            times[label].append(startup_gc.first_claim_ms(ENTRY, url, args.n, src))
        print(f"run {run + 1} of {args.runs}: "
              + ", ".join(f"{k} {v[-1]:.0f} ms" for k, v in times.items())
              + f", load {os.getloadavg()[0]:.2f}", file=sys.stderr)  # fmt: skip
    where = "SQLite" if args.sqlite else "PostgreSQL"
    print(f"process start -> first claim, {args.runs} runs of each in turn, {where}, N={args.n}")
    first = statistics.median(times[next(iter(variants))])
    for label, got in times.items():
        q1, median, q3 = statistics.quantiles(got, n=4)
        print(f"{label}: median {median:.0f} ms (quartiles {q1:.0f} / {q3:.0f} ms), "
              f"{median / first:.2f}x the first")  # fmt: skip


if __name__ == "__main__":
    main()
