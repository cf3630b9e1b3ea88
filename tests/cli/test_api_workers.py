"""``agentqueue api --workers N``: N processes serve one port over one PostgreSQL database, each
with the whole API (tokens, tenants, problem details), and stop together on SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.postgres


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _listening_port(proc: subprocess.Popen[str], within: float = 60) -> int:
    assert proc.stderr is not None
    deadline = time.monotonic() + within
    seen = []
    lines: queue.Queue[str] = queue.Queue()  # read aside: a bare readline would wait for ever
    stream = proc.stderr

    def read() -> None:
        for line in iter(stream.readline, ""):
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        found = re.search(r"API listening on http://127\.0\.0\.1:(\d+)/v1 \(2 processes\)", line)
        if found:
            return int(found.group(1))
    raise AssertionError("the API did not say where it listens:\n" + "".join(seen[-20:]))


def _token(url: str, name: str, tenant: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "agentqueue.cli", "--db", url, "tokens", "create", "--name", name,
         "--role", "submitter", "--tenant", tenant, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return str(json.loads(done.stdout)["secret"])


def test_several_processes_serve_one_port(pg_url: str) -> None:
    env = {**os.environ, "AGENTQUEUE_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentqueue.cli", "--db", pg_url, "api", "--host", "127.0.0.1",
         "--port", "0", "--workers", "2"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        port = _listening_port(proc)
        # Asked at once, before either process has started: the line was true, so the
        # connection waits in the backlog instead of being refused.
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=60).status_code == 200
        alice, bob = _token(pg_url, "alice", "default"), _token(pg_url, "bob", "other")
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2 or httpx.get(f"{base}/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        ids = []
        # New connections each time, so both processes answer some of them.
        for i in range(20):
            made = httpx.post(
                f"{base}/v1/tasks",
                json={"title": f"t{i}", "task_type": "noop", "idempotency_key": f"k{i % 10}"},
                headers={"Authorization": f"Bearer {alice}"},
            )
            assert made.status_code == (201 if i < 10 else 200), made.text
            ids.append(made.json()["id"])
        assert ids[10:] == ids[:10]  # the second ten matched the first by idempotency key
        mine = httpx.get(f"{base}/v1/tasks/{ids[0]}", headers={"Authorization": f"Bearer {alice}"})
        assert mine.status_code == 200 and mine.json()["requested_by"] == "alice"
        theirs = httpx.get(f"{base}/v1/tasks/{ids[0]}", headers={"Authorization": f"Bearer {bob}"})
        assert theirs.status_code == 404
        assert theirs.headers["content-type"] == "application/problem+json"
        assert httpx.get(f"{base}/v1/tasks/{ids[0]}").status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        finally:
            proc.kill()
    assert code == 0
