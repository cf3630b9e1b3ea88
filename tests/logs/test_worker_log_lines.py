"""A real ``agentqueue --log-format json worker`` (a subprocess, both backends): one JSON line per
task transition with its fields, a handler's traceback in the line of its failure and in
``agentqueue logs ID``, secrets masked everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue

AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
HERE = Path(__file__).parent
SECRET = "tok-5e3a9-not-for-logs"


def _env(db_url: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    environ.update(AQ_TEST_APP_DB=db_url, AQ_TEST_SERVICE_TOKEN=SECRET, PYTHONPATH=str(HERE))
    return environ


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTQUEUE), "--db", db_url, *args],
        cwd=HERE, env=_env(db_url), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_json_lines_tracebacks_and_masking(db_url: str) -> None:
    queue = AsyncQueue(db_url)
    try:
        failing = (await queue.submit({"title": "b", "task_type": "boom", "max_retries": 0})).task
        passing = (await queue.submit({"title": "f", "task_type": "fine"})).task
    finally:
        await queue.close()

    done = _cli(db_url, "--log-format", "json", "worker", "--app", "log_app:queue", "--until-idle")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stderr and "hidden-pw-42" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    for line in lines:
        assert line["time"].endswith("Z") and {"level", "logger", "message"} <= line.keys()
    moves: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["logger"] == "agentqueue.worker.transitions":
            moves.setdefault(line["task_id"], []).append(line)
    assert [(m["from"], m["to"]) for m in moves[str(passing.id)]] == [
        ("queued", "executing"),
        ("executing", "completed"),
    ]
    claim, failure = moves[str(failing.id)]
    assert (claim["from"], claim["to"], failure["from"], failure["to"]) == (
        "queued", "executing", "executing", "failed",
    )  # fmt: skip
    for line in (claim, failure):
        assert line["task_type"] == "boom" and line["attempt"] == 1 and "agent" in line
        assert isinstance(line["duration_ms"], float)
    assert failure["error"] == "RuntimeError: service refused *** at https://bot:***@api.test/"
    trace = failure["traceback"]
    assert 'return payload["issue"]' in trace and "KeyError: 'issue'" in trace
    assert "raise RuntimeError(" in trace and trace.rstrip().endswith(failure["error"])
    assert "traceback" not in moves[str(passing.id)][1]
    app_line = next(line for line in lines if line["logger"] == "log_app")
    assert app_line["message"] == "calling the service with ***" and app_line["note"] == "key ***"

    shown = _cli(db_url, "logs", str(failing.id))
    assert shown.returncode == 0, shown.stderr
    assert "--- attempt 1 traceback ---" in shown.stdout
    assert 'return payload["issue"]' in shown.stdout and "KeyError: 'issue'" in shown.stdout
    assert SECRET not in shown.stdout
    task = _cli(db_url, "show", str(failing.id), "--json")
    assert json.loads(task.stdout)["error"] == failure["error"]  # the short message stays
