"""Facts about the machine and the code a run measured: cores, memory, versions, git commit."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from ..store.admin import SQLITE_VERSION


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def _memory_mib() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return None


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():  # a worktree: "gitdir: <path>"
        text = dot.read_text().strip()
        if text.startswith("gitdir:"):
            path = Path(text.split(":", 1)[1].strip())
            return path if path.is_absolute() else (root / path).resolve()
    return None


def git_commit(root: Path | None) -> str | None:
    """The commit checked out at ``root``, read from the .git files (no git needed)."""
    if root is None:
        return None
    with contextlib.suppress(OSError):
        git = _git_dir(root)
        if git is None:
            return None
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        for base in (git, common):
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    return None


def machine(root: Path | None, postgres: str | None) -> dict[str, Any]:
    """Cores, memory, CPU, OS, Python, PostgreSQL, SQLite and agentqueue versions, git commit."""
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "memory_mib": _memory_mib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "postgresql": postgres,
        "sqlite": SQLITE_VERSION,
        "agentqueue": __version__,
        "git_commit": git_commit(root),
    }
