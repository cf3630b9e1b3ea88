"""Start-up A/B: the wall and CPU time of ``agentqueue --help`` and ``agentqueue list`` (SQLite,
100 tasks: the start-up target's command and size, as ``agentqueue bench startup`` runs them),
for two or more source trees in alternation, so that a change is measured against the load of
the same minutes.

Each variant is ``LABEL=SRC`` where SRC is a directory holding the ``agentqueue`` package (a
``git archive`` of a commit, unpacked; ``src`` is this checkout's). Each run is a fresh process
started as the installed ``agentqueue`` script starts (``agentqueue.launch.main``, then
``sys.exit``), with SRC first on PYTHONPATH and bytecode written, as an installed package has it.
Every round runs each variant's two commands ``--runs`` times, the variants in turn; the medians
over all rounds are printed per variant, with the ratio of each later variant's to the first's.
``--show`` adds ``show`` of a task that has ended (cancelled) and of one that waits::

    .venv/bin/python benchmarks/startup_ab.py --variant A=/tmp/base/src --variant B=src \\
        [--runs 5] [--rounds 4] [--show]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from agentqueue.bench.startup import command_env, small_database, time_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import parse_variants

SCRIPT = (
    "import sys; from agentqueue.launch import main; sys.argv[0] = 'agentqueue'; sys.exit(main())"
)
"""What the installed ``agentqueue`` script runs."""


def _env(src: str) -> dict[str, str]:
    """``agentqueue bench startup``'s environment, with the tree ``src`` first on the path."""
    return {**command_env(), "PYTHONPATH": os.path.abspath(src)}


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of ``argv`` (a fresh process)."""
    wall, cpu = time_run(argv, env)
    return wall * 1000, cpu * 1000


def _show_commands(exe: list[str], db: list[str], env: dict[str, str]) -> dict[str, list[str]]:
    """``show`` of two of the database's tasks (``db`` is its ``--db URL``): the first cancelled
    (ended: no reasons to tell), the second left queued (its reasons are told)."""
    listed = subprocess.run(
        [*exe, *db, "list", "--json", "--limit", "2"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    ended, waiting = (task["id"] for task in json.loads(listed.stdout))
    subprocess.run([*exe, *db, "cancel", ended], env=env, capture_output=True, check=True)
    return {"show (ended)": [*db, "show", ended], "show (waiting)": [*db, "show", waiting]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="LABEL=SRC")
    parser.add_argument("--runs", type=int, default=5, help="runs of each command a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--show",
        action="store_true",
        help="also time `show` of a task that has ended (cancelled) and of one that waits",
    )
    args = parser.parse_args()
    variants = [(v.label, v.src) for v in parse_variants(parser, args.variant)]
    exe = [sys.executable, "-c", SCRIPT]
    with tempfile.TemporaryDirectory(prefix="aq-startup-ab-") as tmp:
        # The database is made by the first tree; every tree reads it.
        commands = small_database(tmp, exe, _env(variants[0][1]))
        if args.show:
            database = commands["list"][:-1]  # --db URL, before the command
            commands.update(_show_commands(exe, database, _env(variants[0][1])))
        walls: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        for _, src in variants:  # once each, to warm the file cache and write bytecode
            for argv in commands.values():
                _time([*exe, *argv], _env(src))
        for round_no in range(1, args.rounds + 1):
            line = []
            for label, src in variants:
                for name, argv in commands.items():
                    for _ in range(args.runs):
                        wall, cpu = _time([*exe, *argv], _env(src))
                        walls.setdefault((label, name), []).append(wall)
                        cpus.setdefault((label, name), []).append(cpu)
                    line.append(
                        f"{label} {name} {statistics.median(walls[label, name][-args.runs :]):.0f}"
                    )
            load = os.getloadavg()[0]
            print(f"round {round_no}: " + ", ".join(line) + f" ms (load {load:.2f})", flush=True)
    print(f"\n{args.rounds} rounds of {args.runs} runs of each command per variant; medians")
    print("| variant | command | wall ms | CPU ms | wall / first | CPU / first |")
    print("|---|---|---|---|---|---|")
    first = variants[0][0]
    for label, _ in variants:
        for name in commands:
            wall = statistics.median(walls[label, name])
            cpu = statistics.median(cpus[label, name])
            ratio_wall = wall / statistics.median(walls[first, name])
            ratio_cpu = cpu / statistics.median(cpus[first, name])
            print(f"| {label} | `{name}` | {wall:.0f} | {cpu:.0f} | {ratio_wall:.2f}x | "
                  f"{ratio_cpu:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
