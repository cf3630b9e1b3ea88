"""Child processes of a benchmark run, and what /proc says about them.

A child speaks JSON lines on stdout: ``{"event": "ready"}`` when its worker can start, and
``{"event": "result", ...}`` at the end. Its stderr goes to a file in the run's work directory,
whose tail is shown when the child fails.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import itertools
import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SERIAL = itertools.count(1)
_KICKS: list[str] = []


def shutdown_kicks() -> list[str]:
    """The children whose worker shutdown hung and had to be kicked (see ``child.join``)."""
    return list(_KICKS)


class ChildError(RuntimeError):
    """A child process failed or did not answer in time."""


def cache_bytecode() -> None:
    """Let the benchmark's children start as installed software does, from cached bytecode: pip
    compiles what it installs (the peers' packages), while the modules of an editable install
    (agentqueue's own here) are compiled on first import and cached, unless
    PYTHONDONTWRITEBYTECODE is set, when every process compiles them again at its start. That
    variable is dropped for the children, and agentqueue's modules are compiled now."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(Path(__file__).resolve().parents[1]), quiet=2)


class Child:
    """A benchmark child process (``python -m agentqueue.bench.child ROLE ARGS``)."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str, stderr_path: Path) -> None:
        self.proc = proc
        self.name = name
        self.stderr_path = stderr_path

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    @classmethod
    async def start(cls, role: str, args: dict[str, Any], work_dir: Path, name: str) -> Child:
        """Start a child running ``role`` with ``args``."""
        cmd = [sys.executable, "-m", "agentqueue.bench.child", role, json.dumps(args)]
        return await cls.start_command(cmd, work_dir, name)

    @classmethod
    async def start_command(
        cls, cmd: list[str], work_dir: Path, name: str, env: dict[str, str] | None = None
    ) -> Child:
        """Start any command as a child."""
        stderr_path = work_dir / f"{name}-{next(_SERIAL)}.stderr"
        with stderr_path.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
                limit=1 << 20,
            )
        return cls(proc, name, stderr_path)

    def stderr_tail(self, lines: int = 15) -> str:
        """The end of what the child wrote to stderr."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _failed(self, what: str) -> ChildError:
        tail = self.stderr_tail()
        last = tail.splitlines()[-1].strip() if tail else ""
        head = f"{self.name}: {what}" + (f" ({last})" if last else "")
        return ChildError(head + (f"\n{tail}" if tail else ""))

    async def message(self, event: str, within: float) -> dict[str, Any]:
        """Read lines until the JSON message ``{"event": event, ...}``; ChildError if the child
        ends first or ``within`` seconds pass."""
        assert self.proc.stdout is not None

        async def read() -> dict[str, Any]:
            assert self.proc.stdout is not None
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    code = await self.proc.wait()
                    raise self._failed(f"exited with code {code} before saying {event!r}")
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(data, dict) and data.get("event") == event:
                    if data.get("shutdown_kicks"):
                        _KICKS.append(f"{self.name}: {data['shutdown_kicks']}")
                    return data

        try:
            return await asyncio.wait_for(read(), within)
        except TimeoutError:
            await self.kill()
            raise self._failed(f"no {event!r} within {within:.0f}s") from None

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    async def stop(self, within: float = 30.0) -> dict[str, Any]:
        """SIGTERM, then the child's result message; it must exit cleanly."""
        self.terminate()
        result = await self.message("result", within)
        await self.wait(within)
        return result

    async def wait(self, within: float) -> int:
        """Wait for the child to exit (killing it after ``within`` seconds); ChildError unless 0."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            await self.kill()
            raise self._failed(f"did not exit within {within:.0f}s") from None
        if code != 0:
            raise self._failed(f"exited with code {code}")
        return code

    async def kill(self) -> None:
        """Kill the child and reap it."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


async def run_command(
    cmd: list[str], work_dir: Path, name: str, within: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run a command to the end and return the last JSON object it printed on stdout."""
    child = await Child.start_command(cmd, work_dir, name, env)
    assert child.proc.stdout is not None
    try:
        out = await asyncio.wait_for(child.proc.stdout.read(), within)
    except TimeoutError:
        await child.kill()
        raise child._failed(f"did not finish within {within:.0f}s") from None
    await child.wait(30)
    for line in reversed(out.decode(errors="replace").splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    raise child._failed("printed no JSON result")


def machine_busy_secs() -> float:
    """Busy CPU seconds of the whole machine since boot: every process on every core (user,
    nice, system, irq and softirq time from /proc/stat; idle, I/O wait and time stolen by the
    hypervisor left out). Its difference across a drain is what the drain cost the machine,
    worker and database alike; the peers' drivers read it the same way
    (benchmarks/peers/machine.py)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:8]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields)
    return (user + nice + system + irq + softirq) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (all its threads), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After ")": state is field 3, so utime (field 14) and stime (field 15) are at 11 and 12.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every process descended from it (parents read from /proc/<pid>/stat), for
    a server that runs in several processes."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += parents.get(current, [])
    return out


def status_kib(pid: int, key: str) -> int | None:
    """A ``kB`` figure of /proc/<pid>/status (``VmHWM``, ``VmRSS``)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def peak_rss_bytes(pid: int) -> int | None:
    """Peak resident set size (VmHWM) in bytes."""
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and every process descended from it (a worker and its SQLite
    writer process)."""
    total = 0.0
    for one in tree_pids(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended meanwhile
            total += cpu_seconds(one)
    return total


def tree_peak_rss_bytes(pid: int) -> int | None:
    """The peak resident sets (VmHWM) of ``pid`` and its descendants, added up (an upper
    bound of their peak together)."""
    peaks = [peak_rss_bytes(one) for one in tree_pids(pid)]
    return sum(p for p in peaks if p is not None) if peaks[0] is not None else None


def tree_pss_bytes(pid: int) -> int | None:
    """The proportional set sizes (Pss of /proc/<pid>/smaps_rollup: each shared page counted
    once, split among the processes that map it) of ``pid`` and its descendants, added up:
    what the processes together cost the machine's memory now."""
    total = 0
    for one in tree_pids(pid):
        try:
            text = Path(f"/proc/{one}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            if one == pid:
                return None
            continue
        total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:"))
    return total * 1024


def own_and_children_peak_rss_bytes() -> int | None:
    """This process's peak resident set plus the largest of its ended children's (its SQLite
    writer process, once the queue is closed): an upper bound of their peak together."""
    own = peak_rss_bytes(os.getpid())
    if own is None:
        return None
    return own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
