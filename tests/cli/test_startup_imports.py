"""Start-up (the command's budget): ``agentqueue --help`` and ``agentqueue list`` on SQLite load
none of the heavy modules they do not use. Checked by what a fresh interpreter has loaded, not
by timing (``agentqueue bench startup`` measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("fastapi", "uvicorn", "starlette", "httpx", "jinja2", "psycopg", "psycopg_pool",
         "croniter", "tqdm", "rich", "prometheus_client")  # fmt: skip
"""Libraries neither command needs."""
OURS = (
    "agentqueue.api",
    "agentqueue.worker",
    "agentqueue.scheduler",
    "agentqueue.delivery",
    "agentqueue.client.http",
    "agentqueue.executors.subprocess",
    "agentqueue.dashboard",
)
"""Parts of agentqueue neither command needs."""

PROBE = """
import json, sys
sys.argv = ["agentqueue", *json.loads(sys.argv[1])]
from agentqueue.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*args: str) -> set[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules
        if m.split(".")[0] in HEAVY or any(m == o or m.startswith(o + ".") for o in OURS)
    )  # fmt: skip


def test_help_loads_no_heavy_module() -> None:
    modules = loaded("--help")
    assert heavy(modules) == []
    assert "agentqueue.queue" not in modules and "agentqueue.config" not in modules


def test_list_on_sqlite_loads_no_heavy_module(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'small.db'}"
    modules = loaded("--db", url, "list")
    assert "agentqueue.store.sqlite.dialect" in modules  # it did read the database
    assert heavy(modules) == []
