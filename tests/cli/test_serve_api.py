"""``agentqueue serve`` serves the HTTP API beside its worker and scheduler: a task submitted
over HTTP is run by the same process and read back over HTTP; SIGTERM stops both; ``--no-api``
serves nothing; a port already taken fails the command, naming the address."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
LISTENING = re.compile(r"API listening on (http://[\d.]+:\d+)/v1")


def _env(db: str) -> dict[str, str]:
    env = dict(os.environ)
    env["AGENTQUEUE_DB"] = db
    env["PYTHONPATH"] = f"{HERE}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def _token(db: str, role: str = "submitter") -> str:
    out = subprocess.run(
        [str(AGENTQUEUE), "tokens", "create", "--name", f"t-{role}", "--role", role, "--json"],
        env=_env(db), capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return str(json.loads(out.stdout)["secret"])


def _wait_for_address(proc: subprocess.Popen[str], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = LISTENING.search(log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"serve never listened: {log.read_text()}")


def test_serve_runs_what_the_api_submits_and_stops_on_sigterm(db_url: str, tmp_path: Path) -> None:
    """A task POSTed to the API that serve started is run by serve's own worker; the client
    waiting with ?wait= gets it completed; SIGTERM ends the process with exit 0."""
    secret = _token(db_url)
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(AGENTQUEUE), "serve", "--app", "serve_app:queue", "--port", "0"],
            env=_env(db_url), stdout=sink, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        base = _wait_for_address(proc, log)
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            made = http.post(
                "/v1/tasks", json={"title": "t", "task_type": "echo", "payload": {"n": 1}}
            )
            assert made.status_code == 201, made.text
            task_id = made.json()["id"]
            done = http.get(f"/v1/tasks/{task_id}", params={"wait": 30}).json()
        assert done["state"] == "completed"
        assert done["result"] == {"echo": {"n": 1}}
        assert done["requested_by"] == "t-submitter"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()


def test_serve_no_api_listens_nowhere(db_url: str, tmp_path: Path) -> None:
    """With --no-api, serve runs its worker and binds no port: pointed at a port another
    socket holds (which fails serve with the API), it runs and exits 0, saying nothing about
    an API."""
    log = tmp_path / "serve.log"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        proc = subprocess.run(
            [str(AGENTQUEUE), "serve", "--app", "serve_app:queue", "--no-api", "--until-idle",
             "--port", port],
            env=_env(db_url), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, log.read_text()
    assert "API listening" not in proc.stderr


def test_serve_fails_when_the_port_is_taken(db_url: str) -> None:
    """A port another socket holds fails serve at once with exit 1, naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [str(AGENTQUEUE), "serve", "--app", "serve_app:queue", "--port", str(port)],
            env=_env(db_url), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert f"could not listen on 127.0.0.1:{port}" in proc.stderr


def test_api_alone_answers_health_and_stops_on_sigterm(db_url: str, tmp_path: Path) -> None:
    """``agentqueue api`` serves /healthz and /readyz without a token, refuses /v1 without
    one, and exits 0 on SIGTERM."""
    log = tmp_path / "api.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(AGENTQUEUE), "api", "--port", "0"],
            env=_env(db_url), stdout=sink, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        base = _wait_for_address(proc, log)
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.get("/healthz").json() == {"status": "ok", "detail": None}
            assert http.get("/readyz").json()["status"] == "ready"
            refused = http.get("/v1/stats")
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()
