"""A command's process ends with its heap out of the cyclic collector's reach (agentqueue.launch:
the interpreter's last collections at exit walked every object the modules built, about a tenth
of a one-shot command's time), whether the command succeeds or fails, and nothing it prints is
lost on the way out. Seen from inside the real ``agentqueue`` script's process by an exit hook a
``sitecustomize`` module installs, registered before any of the command's own; the time itself
is measured by ``benchmarks/startup_ab.py``, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentqueue import AsyncQueue

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))

HOOK = """
import atexit, gc, os

def _report():
    # Hooks run last-registered first: this one, installed before the command ran, runs after
    # the command's own (the logging handlers' closing among them).
    with open(os.environ["AQ_EXIT_REPORT"], "w") as out:
        out.write(str(gc.get_freeze_count()))

atexit.register(_report)
"""


def _run(tmp_path: Path, *argv: str) -> tuple[int, str, str, int]:
    """Run the installed script; its exit code, stdout, stderr and the count of objects frozen
    when it exited."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    report = tmp_path / "frozen.txt"
    report.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    env.update(PYTHONPATH=str(hook_dir), AQ_EXIT_REPORT=str(report))
    done = subprocess.run([AGENTQUEUE, *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    return done.returncode, done.stdout, done.stderr, int(report.read_text())


async def test_a_one_shot_command_ends_with_its_heap_frozen_and_its_output_whole(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'exit.db'}"
    async with AsyncQueue(db_url) as queue:
        for i in range(300):
            await queue.submit({"title": f"task {i}", "task_type": "docs", "payload": {"i": i}})
    code, out, err, frozen = _run(tmp_path, "--db", db_url, "list", "--json", "--limit", "300")
    assert code == 0, err[-3000:]
    # Every task printed, the last line included (about 300 KB through a pipe).
    listed = json.loads(out)
    assert sorted(t["payload"]["i"] for t in listed) == list(range(300))
    # The modules alone are thousands of objects; a process that ends unfrozen reports 0.
    assert frozen > 1000


def test_a_failing_command_ends_frozen_too_with_its_exit_code_and_message(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'exit.db'}"
    code, out, err, frozen = _run(
        tmp_path, "--db", db_url, "show", "01a2505f-377a-7755-8eaa-48ec1eada362"
    )
    assert code != 0 and out == ""
    assert "01a2505f-377a-7755-8eaa-48ec1eada362" in err, err[-3000:]
    assert frozen > 1000
