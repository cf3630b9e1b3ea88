"""The control groups a worker makes for its agents: where the cgroup v2 hierarchy is, and how a
group is removed once its processes are gone."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("agentqueue.worker")

_REMOVE_ROUNDS = 50
_REMOVE_PAUSE_SECS = 0.02


def _unescape(field: str) -> str:
    """A path of /proc/self/mountinfo (spaces and the like are written as \\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def cgroup2_dir() -> Path | None:
    """The directory of this process's own cgroup in the cgroup v2 hierarchy (mounted at
    ``/sys/fs/cgroup`` on a unified host, ``/sys/fs/cgroup/unified`` on a hybrid one, found in
    ``/proc/self/mountinfo``); None without a cgroup v2 mount."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            own = next((line[3:] for line in f.read().splitlines() if line.startswith("0::")), "/")
    except OSError:
        return None
    for line in mounts:
        fields, _, fs = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not fs.startswith("cgroup2 "):
            continue
        root, mountpoint = _unescape(parts[3]), Path(_unescape(parts[4]))
        # The mount may show a subtree only (its root); our path is relative to the hierarchy's.
        if own == root or own.startswith(root.rstrip("/") + "/"):
            inside = mountpoint / own[len(root) :].lstrip("/")
            if inside.is_dir():
                return inside
        return mountpoint
    return None


def remove_cgroup(path: Path) -> None:
    """Remove the group at ``path`` (its processes have ended; a straggler is killed first)."""
    for _ in range(_REMOVE_ROUNDS):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(_REMOVE_PAUSE_SECS)
    log.warning("could not remove the cgroup %s", path)
