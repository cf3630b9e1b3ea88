"""The worker's start line names its database (never a password) and where its URL and settings
came from, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentqueue.store import describe_url

AGENTQUEUE = Path(sys.executable).with_name("agentqueue")

APP = """
import os
from agentqueue import AsyncQueue

queue = AsyncQueue(os.environ["AQ_TEST_APP_DB"])


@queue.handler("noop")
def noop(task, ctx):
    return None
"""


def start_line(tmp_path: Path, *args: str, **env: str) -> str:
    """Run a worker until idle; its ``started`` line."""
    (tmp_path / "start_app.py").write_text(APP)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    environ.update(AGENTQUEUE_LOG_LEVEL="INFO", **env)
    before, _, after = " ".join(args).partition(" worker-args ")
    done = subprocess.run(
        [str(AGENTQUEUE), *before.split(), "worker", "--app", "start_app:queue", "--until-idle",
         *after.split()],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stderr.splitlines() if " started on " in line)


def test_config_against_the_apps_own_url_says_the_app_won(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "other.toml"
    config.write_text(f'db = "sqlite:///{tmp_path / "other.db"}"\n')
    line = start_line(tmp_path, "--config", str(config), AQ_TEST_APP_DB=db_url)
    assert f"started on {describe_url(db_url)} (" in line, line
    assert (
        f"database from the URL of --app start_app:queue (not the db in --config {config}); "
        f"settings from --config {config}"
    ) in line, line
    assert not (tmp_path / "other.db").exists()


def test_db_and_config_from_the_environment_are_named(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "conf.toml"
    config.write_text("[worker]\npoll_secs = 0.2\n")
    line = start_line(
        tmp_path, AQ_TEST_APP_DB="sqlite:///unused.db", AGENTQUEUE_DB=db_url,
        AGENTQUEUE_CONFIG=str(config),
    )  # fmt: skip
    assert (
        f"started on {describe_url(db_url)} (database from AGENTQUEUE_DB; "
        f"settings from AGENTQUEUE_CONFIG={config})"
    ) in line, line
    assert "password" not in line and "@" not in line


def test_defaults_are_said(tmp_path: Path) -> None:
    line = start_line(
        tmp_path, "--db", f"sqlite:///{tmp_path / 'q.db'}", AQ_TEST_APP_DB="sqlite:///unused.db"
    )
    assert "(database from --db; settings: defaults, no config file)" in line, line
    # Handlers in threads: few slots; the batch and the claims in flight follow them.
    assert line.endswith(
        "handlers(noop); concurrency 10 (derived), claim batch 5 (derived), claims in flight 2 "
        "(derived), outcome writes in flight 2 (derived)"
    ), line


def test_explicit_speed_settings_are_said_as_set(tmp_path: Path) -> None:
    config = tmp_path / "conf.toml"
    config.write_text("[worker]\nclaims_in_flight = 3\n")
    line = start_line(
        tmp_path, "--db", f"sqlite:///{tmp_path / 'q.db'}", "--config", str(config),
        "worker-args", "--concurrency", "64", AQ_TEST_APP_DB="sqlite:///unused.db",
    )  # fmt: skip
    assert line.endswith(
        "concurrency 64 (set), claim batch 32 (derived), claims in flight 3 (set), "
        "outcome writes in flight 3 (derived)"
    ), line


def test_a_database_is_described_without_user_password_or_query() -> None:
    url = "postgresql://agent:s3cret@db.example:6543/jobs?sslmode=require&password=x"
    assert describe_url(url) == "postgresql db.example:6543/jobs"
    assert describe_url("postgres://db.example/jobs") == "postgresql db.example:5432/jobs"
    assert describe_url("sqlite:///queue.db") == "sqlite queue.db"
    assert describe_url("sqlite:////var/lib/q.db") == "sqlite /var/lib/q.db"
