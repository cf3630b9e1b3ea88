"""Freeze hold: how long a worker's event loop is held as it freezes its startup heap
(``agentqueue.heap.freeze_startup_heap``, called just after the worker's first claim), and the
drain around it, for two or more source trees in alternation.

The drain is ``benchmarks/drain_ab.py``'s (one ``agentqueue worker --app
agentqueue.bench.noop_app:queue`` process, default flags, N tasks preloaded on a fresh
PostgreSQL database, ANALYZE). Each variant is ``LABEL=SRC`` as there. The worker runs with
``benchmarks/freeze_hook`` on its PYTHONPATH after SRC, whose ``sitecustomize`` times the call
in the worker itself. Prints each run (the hold, the rate from the worker's start to the last
completion and from the first claim, the worker's CPU per task), then each variant's medians
and their ratio to the first's::

    .venv/bin/python benchmarks/freeze_hold.py --variant A=/tmp/base/src --variant B=src \\
        [--n 20000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import drain_ab  # noqa: E402
from variants import parse_variants  # noqa: E402

HOOK = HERE / "freeze_hook"


def run_one(src: str, url: str, n: int) -> dict[str, float]:
    """One drain of ``n`` tasks by the tree ``src``; its figures, the hold among them."""
    env = drain_ab.prepare(src, None, None, url, n)
    with tempfile.TemporaryDirectory(prefix="aq-freeze-hold-") as tmp:
        out = Path(tmp) / "hold.txt"
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(HOOK)])
        env["AQ_FREEZE_HOLD_OUT"] = str(out)
        result = drain_ab.drain(env, url, n)
        holds = [float(x) for x in out.read_text().split()] if out.exists() else []
    if result.get("per_s") is None:
        raise RuntimeError(f"the drain did not complete: {result}")
    if len(holds) != 1:
        raise RuntimeError(f"expected one freeze in the worker, timed {len(holds)}")
    return {
        "hold_ms": holds[0],
        "per_s": float(result["per_s"]),  # type: ignore[arg-type]
        "claim_to_done_per_s": float(result["claim_to_done_per_s"]),  # type: ignore[arg-type]
        "worker_us": float(result["worker_us"]),  # type: ignore[arg-type]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[], help="LABEL=SRC")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_freeze_hold")
    args = parser.parse_args()
    variants = [(v.label, v.src) for v in parse_variants(parser, args.variant)]
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in variants}
    os.chdir(HERE.parent)
    print(f"N={args.n:,}, {args.rounds} rounds, PostgreSQL {args.pg}")
    for round_no in range(1, args.rounds + 1):
        for label, src in variants:
            got = run_one(src, args.pg, args.n)
            runs[label].append(got)
            print(f"round {round_no} {label}: freeze held the loop {got['hold_ms']:.1f} ms; "
                  f"{got['per_s']:,.0f}/s (claim to done {got['claim_to_done_per_s']:,.0f}/s), "
                  f"worker CPU {got['worker_us']:.0f} us a task, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    first = variants[0][0]

    def median(label: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[label])

    print("| variant | freeze hold ms | drain /s | claim to done /s | worker us a task | "
          "rate / first |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label, _ in variants:
        print(f"| {label} | {median(label, 'hold_ms'):.1f} | {median(label, 'per_s'):,.0f} | "
              f"{median(label, 'claim_to_done_per_s'):,.0f} | {median(label, 'worker_us'):.0f} | "
              f"{median(label, 'per_s') / median(first, 'per_s'):.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
