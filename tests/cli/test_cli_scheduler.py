"""The scheduler's commands on both backends: pause, resume, and a cyclic dependency refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from click.testing import CliRunner, Result

from agentqueue.cli import main


def cli(db: str, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["--db", db, "--actor", "oncall", *args], catch_exceptions=False
    )


def test_pause_lists_and_resume_undoes_it(db_url: str) -> None:
    paused = cli(db_url, "pause", "deploy", "--reason", "incident 42")
    assert paused.exit_code == 0 and "paused deploy" in paused.stdout
    listed = cli(db_url, "pause", "--json")
    [entry] = json.loads(listed.stdout)
    assert (entry["task_type"], entry["paused_by"], entry["reason"]) == (
        "deploy",
        "oncall",
        "incident 42",
    )
    task = json.loads(cli(db_url, "submit", "--title", "ship", "--type", "deploy", "--json").stdout)
    assert task["state"] == "pending"  # not admitted while paused
    assert "resumed deploy" in cli(db_url, "resume", "deploy").stdout
    assert "was not paused" in cli(db_url, "resume", "deploy").stdout
    assert "no task type is paused" in cli(db_url, "pause").stdout


def test_pause_refuses_a_bad_type_with_exit_2(db_url: str) -> None:
    result = cli(db_url, "pause", "no such type!")
    assert result.exit_code == 2 and "task_type" in result.stderr


def test_a_cyclic_batch_is_refused_naming_the_field(db_url: str, tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    batch = tmp_path / "tasks.jsonl"
    batch.write_text(
        json.dumps({"id": a, "title": "a", "task_type": "build", "depends_on": [b]})
        + "\n"
        + json.dumps({"id": b, "title": "b", "task_type": "build", "depends_on": [a]})
        + "\n"
    )
    result = cli(db_url, "submit", "--file", str(batch))
    assert result.exit_code == 2
    assert "tasks[0].depends_on" in result.stderr and "forms a cycle" in result.stderr
    stats = json.loads(cli(db_url, "stats", "--json").stdout)
    assert stats["total"] == 0
