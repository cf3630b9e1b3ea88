"""Helpers of the scheduler tests that start real `agentqueue` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue

AGENTQUEUE = Path(sys.executable).with_name("agentqueue")

OpenQueue = Callable[..., Awaitable[AsyncQueue]]
"""Opens a queue on the test's database with the given settings (the ``open_queue`` fixture)."""


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``agentqueue ARGS`` as a child process, its output in ``log``."""
    env = {**os.environ, "AGENTQUEUE_LOG_LEVEL": "INFO"}
    env.pop("AGENTQUEUE_CONFIG", None)
    with log.open("w") as out:
        return subprocess.Popen(
            [str(AGENTQUEUE), *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def quick_config(tmp_path: Path, sections: str = "") -> Path:
    """A configuration file with quick scheduler passes and worker polls (0.2 s), the agents'
    working directories under ``tmp_path``, and ``sections`` (TOML) after them."""
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        "[scheduler]\ntick_secs = 0.2\n\n[worker]\npoll_secs = 0.2\n"
        f"workdir = {json.dumps(str(tmp_path / 'runs'))}\n\n{sections}",
        encoding="utf-8",
    )
    return config


class Hook:
    """A local HTTP server that records every POST and answers with the next queued status
    (200 once the queue is empty)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with hook._lock:
                    hook.received.append((self.path, body))
                    status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [body for _, body in self.received]


def agent(task_types: list[str], cap: int = 1, **more: Any) -> dict[str, Any]:
    """An ``[agents.NAME]`` entry for a queue that is never run: admission and routing read
    only its capabilities, cap and limits."""
    return {"command": [sys.executable, "-c", "pass"], "task_types": task_types,
            "max_concurrent": cap, **more}  # fmt: skip


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most
