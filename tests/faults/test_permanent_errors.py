"""Faults waiting cannot mend fail fast: ``list``, ``worker``, ``scheduler`` and ``serve`` exit 1
at once rather than waiting for a database that will not mend (the target is within 2 s; a
process that waited would still be running at the check's generous bound of 60 s, which is all
the check asserts: these machines are shared, so the time is printed, never asserted),
naming the cause, never showing the password, never a traceback. A server that is simply down
makes a one-shot command give up after a short wait, saying it cannot reach the database.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from fault_helpers import AGENTQUEUE, HERE

from agentqueue import Queue
from agentqueue.store.migrate import latest_version
from pg_instance import PASSWORD_ROLE, TEST_PASSWORD, PgInstance, free_port

COMMANDS = {
    "list": ["list"],
    "worker": ["worker", "--app", "fault_app:queue"],
    "scheduler": ["scheduler"],
    "serve": ["serve", "--app", "fault_app:queue", "--port", "0"],
}
WRONG_PASSWORD = "wr0ng-pw-never-shown"
FUTURE = 9999


def run_cli(url: str, args: list[str], within: float = 60.0) -> tuple[int | None, str, float]:
    """Run ``agentqueue --db url ARGS``; (exit code or None if still running at ``within``,
    output, seconds taken)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    started = time.monotonic()
    proc = subprocess.Popen(
        [AGENTQUEUE, "--db", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=HERE,
    )
    try:
        out, _ = proc.communicate(timeout=within)
        return proc.returncode, out, time.monotonic() - started
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return None, out, time.monotonic() - started


@pytest.fixture(scope="module")
def urls(pg: PgInstance) -> dict[str, tuple[str, list[str]]]:
    """Each cause: the URL that shows it and what the message must name."""
    future = pg.create_database("aq_future")
    with Queue(future) as q:
        q.open()
    with psycopg.connect(future, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO aq_schema_version (version, name) VALUES (%s, 'from_the_future')",
            (FUTURE,),
        )
    latest = str(latest_version("postgres"))
    return {
        "no_database": (pg.url("aq_no_such_db"), ['database "aq_no_such_db" does not exist']),
        "wrong_password": (
            pg.url("postgres", PASSWORD_ROLE, WRONG_PASSWORD),
            ["password authentication failed"],
        ),
        "bad_sslmode": (pg.url("postgres") + "?sslmode=bogus", ["sslmode"]),
        "newer_schema": (future, [str(FUTURE), f"version {latest}", "newer"]),
    }


@pytest.mark.parametrize("cause", ["no_database", "wrong_password", "bad_sslmode", "newer_schema"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_permanent_fault_fails_fast(
    urls: dict[str, tuple[str, list[str]]], cause: str, command: str
) -> None:
    url, names = urls[cause]
    code, out, secs = run_cli(url, COMMANDS[command])
    where = f"agentqueue {command} with {cause}: exit {code} after {secs:.2f} s:\n{out}"
    assert code == 1, where
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert errors, where
    for name in names:
        assert name in errors[0], where
    assert WRONG_PASSWORD not in out and TEST_PASSWORD not in out, where
    assert "Traceback" not in out, where
    print(f"{command}/{cause}: exit {code} in {secs:.2f} s: {errors[0]}")


def test_migrate_refuses_a_newer_schema_too(urls: dict[str, tuple[str, list[str]]]) -> None:
    url, names = urls["newer_schema"]
    code, out, secs = run_cli(url, ["migrate"])
    assert code == 1 and all(n in out for n in names), f"exit {code} after {secs:.2f} s:\n{out}"


def test_a_newer_sqlite_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    with Queue(url) as q:
        q.submit(title="before", task_type="docs")
    import sqlite3

    with sqlite3.connect(tmp_path / "queue.db") as conn:
        conn.execute(
            "INSERT INTO aq_schema_version (version, name) VALUES (?, 'from_the_future')",
            (FUTURE,),
        )
    worker = COMMANDS["worker"]
    for args in (["list"], ["submit", "--title", "t", "--type", "docs"], worker):
        code, out, secs = run_cli(url, args)
        latest = latest_version("sqlite")
        where = f"{args}: exit {code} after {secs:.2f} s:\n{out}"
        assert code == 1 and str(FUTURE) in out and f"version {latest}" in out, where


@pytest.mark.parametrize("command", [["list"], ["submit", "--title", "t", "--type", "docs"]])
def test_a_one_shot_command_gives_up_on_a_server_that_is_down(command: list[str]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"  # nothing listens there
    code, out, secs = run_cli(url, command, within=60)
    where = f"{command}: exit {code} after {secs:.2f} s:\n{out}"
    assert code == 1, where
    assert "error: cannot reach the database" in out, where
    assert "waited 5 s" in out, where
    assert "Traceback" not in out, where
    print(f"{command[0]} on a server that is down: exit {code} in {secs:.2f} s")
