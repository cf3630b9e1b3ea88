"""Progress of ``submit --file`` and ``verify`` on long runs: shown on a terminal (a real
pseudo-terminal), never on a pipe."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
TASKS = 2500  # past PROGRESS_MIN: three batches of submit


def _env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    return environ


def on_terminal(*args: str) -> tuple[int, str]:
    """Run ``agentqueue ARGS`` with stdout and stderr on a pseudo-terminal; its exit code and
    everything it wrote there."""
    leader, follower = pty.openpty()
    # A terminal has a size (a fresh pseudo-terminal has none): 40 rows of 100 columns.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(
        [AGENTQUEUE, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
        env=_env(), close_fds=True,
    )  # fmt: skip
    os.close(follower)
    out = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out.extend(chunk)
    os.close(leader)
    return proc.wait(timeout=120), out.decode(errors="replace")


def on_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTQUEUE, *args], capture_output=True, text=True, env=_env(), timeout=120
    )


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    lines = (json.dumps({"title": f"task {i}", "task_type": "docs"}) for i in range(TASKS))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_terminal_shows_progress_of_submit_and_verify(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    code, out = on_terminal("--db", url, "submit", "--file", str(_file(tmp_path)))
    assert code == 0, out
    assert "submitting:" in out and f"/{TASKS}" in out and "task/s" in out
    assert f"{TASKS} created" in out
    code, out = on_terminal("--db", url, "verify")
    assert code == 0, out
    assert "verifying:" in out and f"/{TASKS}" in out and "task/s" in out
    assert "every chain holds" in out


def test_a_pipe_gets_no_progress(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    done = on_pipe("--db", url, "submit", "--file", str(_file(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{TASKS} created, 0 matched existing tasks\n"
    assert done.stderr == ""
    checked = on_pipe("--db", url, "verify")
    assert checked.returncode == 0, checked.stderr
    # Only the unkeyed-audit warning (R24) is on stderr: no progress line on a pipe.
    rest = [
        line for line in checked.stderr.splitlines() if not line.startswith("warning: no audit key")
    ]
    assert rest == [] and "every chain holds" in checked.stdout
