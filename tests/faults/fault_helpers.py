"""Helpers of the fault tests: real processes, the side-effect log, and the checks every
scenario ends with."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).parent
AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
LEASE_LAPSED = "lease_expired"
FAST_RETRIES = """
[queue]
lease_ttl_secs = 4

[retry]
base = 1.0
cap_secs = 0.5
jitter = 0.0

[worker]
poll_secs = {poll_secs}
grace_secs = 5
"""
"""The fault tests' configuration: a 4 s lease and quick retries, so lapses come fast."""
"""The action the scheduler records when it takes back a task whose lease lapsed
(``Action.LEASE_EXPIRED`` in agentqueue.domain.states)."""


MAX_OUTAGE_WARNINGS = 20
"""Warning and error lines one process may log through one outage: once for each of its loops
that meets it (and once more when it comes back), not once for every retry."""


def warnings_between(log: Path, since: float, until: float) -> list[str]:
    """The WARNING and ERROR lines a process logged between two wall-clock times."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue  # a continuation line
        if since <= at <= until and (" WARNING " in line or " ERROR " in line):
            found.append(line)
    return found


def check_outage_logged_once(fleet: Fleet, since: float, until: float) -> None:
    """Each process told of the outage a bounded number of times, not at every retry."""
    for proc in fleet.procs:
        lines = warnings_between(proc.log, since, until)
        assert len(lines) <= MAX_OUTAGE_WARNINGS, (
            f"{proc.name} logged {len(lines)} warnings through one outage (at most "
            f"{MAX_OUTAGE_WARNINGS}: once per loop, not per retry):\n" + "\n".join(lines[:40])
        )


def tail(path: Path, lines: int = 25) -> str:
    """The end of a log file, for assertion messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


@dataclass
class Proc:
    """One ``agentqueue`` child process, its output (stdout and stderr) in ``log``."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited {self.popen.returncode}"
        return f"--- {self.name} ({state}), {self.log}:\n{tail(self.log)}"


@dataclass
class Fleet:
    """The processes of one scenario; any still running at the end are stopped."""

    folder: Path
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, *args: str) -> Proc:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [AGENTQUEUE, *args], cwd=HERE, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def report(self) -> str:
        return "\n".join(p.describe() for p in self.procs)

    def dead(self) -> list[Proc]:
        return [p for p in self.procs if not p.alive()]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.popen.terminate()
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()


def fleet_env(db_url: str, config: Path, fault_log: Path) -> dict[str, str]:
    """The environment of every child process."""
    env = {
        **os.environ,
        "AGENTQUEUE_DB": db_url,
        "AGENTQUEUE_CONFIG": str(config),
        "AQ_FAULT_LOG": str(fault_log),
        "AGENTQUEUE_LOG_LEVEL": "INFO",
    }
    env.pop("AGENTQUEUE_DEBUG", None)
    return env


def wait_until(
    check: Callable[[], bool], within: float, what: str, fleet: Fleet, every: float = 0.25
) -> None:
    """Poll ``check`` (errors from a database that is down count as not yet) until it holds;
    fail at once, with the output of every process, if a process exits meanwhile."""
    deadline = time.monotonic() + within
    last_error = ""
    while True:
        dead = fleet.dead()
        if dead:
            raise AssertionError(
                f"while waiting for {what}, {', '.join(p.name for p in dead)} exited:\n"
                f"{fleet.report()}"
            )
        try:
            if check():
                return
        except Exception as exc:  # the database may be down right now
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} did not happen within {within:g} s (last error: {last_error})\n"
                f"{fleet.report()}"
            )
        time.sleep(every)


@dataclass(frozen=True)
class Attempt:
    """One run of the handler, from the side-effect log."""

    task: str
    pid: str
    start: float
    end: float | None
    how: str


def attempts(fault_log: Path) -> dict[str, list[Attempt]]:
    """Every attempt the side-effect log shows, by task id, in start order."""
    open_: dict[tuple[str, str], list[float]] = defaultdict(list)
    done: dict[str, list[Attempt]] = defaultdict(list)
    lines = fault_log.read_text().splitlines() if fault_log.exists() else []
    for line in lines:
        parts = line.split()
        what, task, pid, mono = parts[0], parts[1], parts[2], float(parts[3])
        if what == "start":
            open_[(task, pid)].append(mono)
        else:
            start = open_[(task, pid)].pop(0)
            done[task].append(Attempt(task, pid, start, mono, parts[5]))
    for (task, pid), starts in open_.items():
        done[task].extend(Attempt(task, pid, s, None, "unfinished") for s in starts)
    return {task: sorted(runs, key=lambda a: a.start) for task, runs in done.items()}


def overlapping(runs: Iterable[Attempt]) -> list[tuple[Attempt, Attempt]]:
    """Pairs of attempts of one task that ran at the same time."""
    ordered = sorted(runs, key=lambda a: a.start)
    found = []
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if first.end is None or second.start < first.end:
                found.append((first, second))
    return found


def check_side_effects(
    fault_log: Path, task_ids: set[str], lapses: dict[str, int], fleet: Fleet
) -> dict[str, int]:
    """No task ran twice at the same time; one that ran more than once had a lapsed lease
    taken back for each extra run; every task ran. Returns runs per task."""
    runs = attempts(fault_log)
    assert set(runs) == task_ids, (
        f"tasks that never ran: {sorted(task_ids - set(runs))[:10]}; unknown tasks in the log: "
        f"{sorted(set(runs) - task_ids)[:10]}\n{fleet.report()}"
    )
    concurrent = {t: overlapping(r) for t, r in runs.items() if overlapping(r)}
    assert not concurrent, (
        f"{len(concurrent)} task(s) ran twice at the same time, e.g. "
        f"{next(iter(concurrent.items()))}\n{fleet.report()}"
    )
    repeated = {t: len(r) for t, r in runs.items() if len(r) > 1}
    unexplained = {
        t: (n, lapses.get(t, 0)) for t, n in repeated.items() if n - 1 > lapses.get(t, 0)
    }
    assert not unexplained, (
        f"{len(unexplained)} task(s) ran more often than lapsed leases explain "
        f"(runs, {LEASE_LAPSED} events): {dict(list(unexplained.items())[:10])}\n{fleet.report()}"
    )
    return {t: len(r) for t, r in runs.items()}
