"""What the SQLite writer tests share: whether a process is alive, and the workers a file holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name: state, parent, ..."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False


def worker_names(path: Path) -> list[str]:
    """The names in aq_workers, in order."""
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM aq_workers ORDER BY name")]
    finally:
        conn.close()
