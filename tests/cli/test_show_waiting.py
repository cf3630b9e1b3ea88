"""``agentqueue show ID`` says why a task waits (text and ``--json``), on both backends and
through a server (``GET /v1/tasks/{id}``'s ``waiting`` field)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentqueue import AsyncQueue

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))


def show(db_url: str, *args: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    done = subprocess.run(
        [AGENTQUEUE, "--db", db_url, "show", *args],
        capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_show_says_why_a_task_waits(db_url: str) -> None:
    async with AsyncQueue(db_url) as queue:
        first = await queue.submit(title="first", task_type="docs")
        then = await queue.submit(title="then", task_type="docs", depends_on=[first.task.id])
        await queue.pause("docs", actor="test")
        done = await queue.submit(title="done", task_type="review")
        await queue.cancel(done.task.id)
    text = show(db_url, str(then.task.id))
    short = str(first.task.id)[:8]
    assert "waiting          task type 'docs' is paused: `agentqueue resume docs`" in text
    assert f"waiting          dependency {short} (queued) cannot go on: task type 'docs' is" in text
    as_json = json.loads(show(db_url, str(first.task.id), "--json"))
    assert [r["code"] for r in as_json["waiting"]] == ["paused", "claim"]
    assert [r["moves"] for r in as_json["waiting"]] == [False, True]
    assert "docs" in as_json["waiting"][0]["text"]
    ended = json.loads(show(db_url, str(done.task.id), "--json"))
    assert "waiting" not in ended
