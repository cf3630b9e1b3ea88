"""``agentqueue bench startup``: how long the command takes to start, as a user meets it.

Runs ``agentqueue --help`` and ``agentqueue list`` on a small SQLite database (100 tasks, the
size the start-up target names) ``runs`` times each, each run a fresh process, and reports the
wall time's p50 and p90 and the CPU time (user + system) of the child's p50: on a busy machine
the wall time grows with the load, the CPU time much less."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TASKS = 100


@dataclass(frozen=True)
class Figures:
    """One command's start-up times, in milliseconds."""

    command: str
    runs: int
    wall_p50: float
    wall_p90: float
    cpu_p50: float

    def line(self) -> str:
        """A row of the markdown table."""
        return (
            f"| `{self.command}` | {self.runs} | {self.wall_p50:.0f} | {self.wall_p90:.0f} | "
            f"{self.cpu_p50:.0f} |"
        )


def _executable() -> list[str]:
    """The ``agentqueue`` beside this Python (else on PATH, else ``python -m``)."""
    found = Path(sys.executable).with_name("agentqueue")
    if found.exists():
        return [str(found)]
    on_path = shutil.which("agentqueue")
    return [on_path] if on_path else [sys.executable, "-m", "agentqueue.cli"]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (a fresh process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def command_env() -> dict[str, str]:
    """The environment the commands are timed in: this one without any ``AGENTQUEUE_`` setting,
    and with bytecode written (as an installed package has it: PYTHONDONTWRITEBYTECODE would make
    every run compile the sources again, which no user pays)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTQUEUE_") and k != "PYTHONDONTWRITEBYTECODE"
    }


def small_database(directory: str, exe: list[str], env: dict[str, str]) -> dict[str, list[str]]:
    """A SQLite database of :data:`TASKS` tasks in ``directory``, submitted by ``exe``; the
    arguments of the two commands timed on it, by name."""
    url = f"sqlite:///{Path(directory) / 'small.db'}"
    lines = "".join(f'{{"title": "task {i}", "task_type": "docs"}}\n' for i in range(TASKS))
    (Path(directory) / "tasks.jsonl").write_text(lines)
    subprocess.run(
        [*exe, "--db", url, "submit", "--file", str(Path(directory) / "tasks.jsonl")],
        env=env, stdout=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    return {"--help": ["--help"], "list": ["--db", url, "list"]}


def measure(runs: int = 20, exe: list[str] | None = None) -> list[Figures]:
    """Time ``--help`` and ``list`` ``runs`` times each, run as ``exe`` (default: the
    ``agentqueue`` command beside this Python)."""
    exe = exe or _executable()
    env = command_env()
    with tempfile.TemporaryDirectory(prefix="aq-startup-") as tmp:
        out = []
        for name, argv in small_database(tmp, exe, env).items():
            time_run([*exe, *argv], env)  # once to warm the file cache
            walls, cpus = [], []
            for _ in range(runs):
                wall, cpu = time_run([*exe, *argv], env)
                walls.append(wall * 1000)
                cpus.append(cpu * 1000)
            out.append(
                Figures(
                    f"agentqueue {name}",
                    runs,
                    _quantile(walls, 0.5),
                    _quantile(walls, 0.9),
                    _quantile(cpus, 0.5),
                )
            )
    return out


def report(figures: list[Figures]) -> str:
    """The figures as a markdown table, with the machine's load."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    head = [
        f"Start-up of the agentqueue command (load average {load}; {os.cpu_count()} CPUs)",
        "",
        "| command | runs | wall p50 ms | wall p90 ms | CPU p50 ms |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + [f.line() for f in figures])
