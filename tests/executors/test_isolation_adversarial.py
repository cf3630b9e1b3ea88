"""Agents are the attack surface: what an attacking agent tries is refused or contained.

Each test runs tests/executors/attacker.py as a command agent built the way a worker builds it
(``build_executors`` on a configuration file, with the queue's database URL), under bubblewrap,
as ``nobody``, with the worker's own secret in this process's environment. Bubblewrap must work
here: a missing one fails these tests (it is never skipped)."""

from __future__ import annotations

import asyncio
import http.server
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import control, make_task, wait_gone

from agentqueue.config import load_settings
from agentqueue.executors.base import AttemptEnd, AttemptResult
from agentqueue.executors.isolation import bwrap_problem, default_user
from agentqueue.executors.subprocess import CommandAgent
from agentqueue.worker.assemble import build_executors

ATTACKER = Path(__file__).with_name("attacker.py")
SECRET_NAME = "AWS_SECRET_ACCESS_KEY"
SECRET = "worker-secret-4f1c"
DATABASE = "postgresql://postgres@127.0.0.1:5432/postgres"
NOBODY = 65534


def test_bubblewrap_works_here() -> None:
    """The rest of this module needs bubblewrap: without it, this says why (never skipped)."""
    assert bwrap_problem(default_user()) is None


_BUILT: list[CommandAgent] = []
_WARM: list[bool] = [False]


@pytest.fixture(autouse=True, params=["cold", "warm"])
async def close_agents(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Each attack twice: through a launcher started for the attempt (cold), and through one a
    worker started ahead (warm). The agents a test built are closed as a worker does when it
    stops (their launchers started ahead go with them), in the test's own event loop."""
    _WARM[0] = request.param == "warm"
    yield
    _WARM[0] = False  # other modules' tests run attacks through run() too
    while _BUILT:
        _BUILT.pop().close()


def make_agent(tmp_path: Path, **fields: Any) -> CommandAgent:
    """The attacker agent as a worker with a config file and a PostgreSQL queue builds it."""
    config_dir = tmp_path / "etc-agentqueue"
    config_dir.mkdir(exist_ok=True)
    config = config_dir / "agentqueue.toml"
    lines = [
        f'db = "{DATABASE}"',
        "[worker]",
        f'workdir = "{tmp_path / "runs"}"',
        "[agents.attacker]",
        f'command = ["{sys.executable}", "{ATTACKER}"]',
        'task_types = ["bugfix"]',
        'isolation = "bwrap"',
        "max_concurrent = 4",
    ]
    for key, value in fields.items():
        lines.append(f"{key} = {value}")
    config.write_text("\n".join(lines) + "\n")
    os.chmod(config, 0o644)  # readable by anyone on the host: only the sandbox hides it
    settings = load_settings(config)
    (agent,) = build_executors(settings, {}, concurrency=4, database_url=DATABASE)
    assert isinstance(agent, CommandAgent)
    _BUILT.append(agent)
    return agent


async def attack(agent: CommandAgent, action: str, *args: object, secs: float = 30) -> Any:
    result = await run(agent, action, *args, secs=secs)
    assert result.end is AttemptEnd.COMPLETED, result.error
    return result.result


async def run(agent: CommandAgent, action: str, *args: object, secs: float = 30) -> AttemptResult:
    task = make_task(payload={"action": action, "args": [str(a) for a in args]})
    if _WARM[0]:
        assert await agent.warm_up() > 0, "no launcher was started ahead"
    return await agent.run(task, control(secs))


@pytest.fixture(autouse=True)
def worker_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)


@pytest.fixture
def http_server() -> Iterator[int]:
    """A local HTTP server on 127.0.0.1; its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def test_the_agent_runs_as_nobody_without_groups(tmp_path: Path) -> None:
    got = await attack(make_agent(tmp_path), "whoami")
    assert (got["uid"], got["gid"]) == (NOBODY, NOBODY)
    assert got["groups"] in ([], [NOBODY])


async def test_the_workers_environment_cannot_be_read(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    got = await attack(agent, "read", f"/proc/{os.getpid()}/environ")
    assert got["ok"] is False, got  # no such process in its PID namespace
    assert SECRET not in str(got)
    listing = await attack(agent, "list", "/proc")
    pids = [int(e) for e in listing["entries"] if e.isdigit()]
    assert os.getpid() not in pids or max(pids) < 10, listing  # its own few processes only
    own = await attack(agent, "read", "/proc/self/environ")
    assert SECRET not in own["data"]


async def test_the_config_file_cannot_be_read(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    config = tmp_path / "etc-agentqueue" / "agentqueue.toml"
    got = await attack(agent, "read", config)
    assert got["ok"] is False and got["errno"] == 2, got
    assert "postgres" not in str(got)


async def test_etc_shadow_reads_empty(tmp_path: Path) -> None:
    got = await attack(make_agent(tmp_path), "read", "/etc/shadow")
    assert "root:" not in str(got)


async def test_another_running_tasks_directory_cannot_be_seen(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    runs = tmp_path / "runs"
    victim = asyncio.create_task(run(agent, "sleep", "20", secs=60))
    for _ in range(500):
        dirs = list(runs.glob("*/task.json")) if runs.exists() else []
        if dirs:
            break
        await asyncio.sleep(0.02)
    assert dirs, "the victim's task did not start"
    victim_task = dirs[0]
    assert "sleep" in victim_task.read_text()  # on the host, it is there
    try:
        got = await attack(agent, "read", victim_task)
        assert got["ok"] is False and got["errno"] == 2, got
        listing = await attack(agent, "list", runs)
        assert len(listing["entries"]) == 1, listing  # its own directory only
    finally:
        victim.cancel()
        with pytest.raises(asyncio.CancelledError):
            await victim


async def test_writing_outside_its_directory_is_refused_or_private(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    system = await attack(agent, "write", "/usr/local/planted")
    assert system["ok"] is False, system
    assert not await asyncio.to_thread(os.path.exists, "/usr/local/planted")
    # The host's /tmp (where this test's files are) is a private, empty /tmp in the sandbox.
    outside = tmp_path / "planted"
    await attack(agent, "write", outside)
    assert not outside.exists()
    inside = await attack(agent, "write", "result-ok.txt")
    assert inside["ok"] is True


async def test_without_network_nothing_is_reachable(tmp_path: Path, http_server: int) -> None:
    agent = make_agent(tmp_path)
    web = await attack(agent, "http", "127.0.0.1", http_server)
    assert web["ok"] is False, web
    db = await attack(agent, "connect", "127.0.0.1", 5432)
    assert db["ok"] is False, db


async def test_with_network_the_web_is_reachable_and_the_database_is_not(
    tmp_path: Path, http_server: int
) -> None:
    agent = make_agent(tmp_path, network="true")
    web = await attack(agent, "http", "127.0.0.1", http_server)
    assert web == {"ok": True, "body": "hello from the host"}
    db = await attack(agent, "connect", "127.0.0.1", 5432)
    assert db["ok"] is False and db["errno"] == 13, db  # refused by the Landlock rule
    socket_dir = await attack(agent, "list", "/var/run/postgresql")
    assert socket_dir["ok"] is False or socket_dir["entries"] == [], socket_dir


async def test_a_fork_bomb_is_held_to_the_process_limit(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, max_processes=32)
    bystander = asyncio.create_task(run(agent, "sleep", "1"))
    got = await attack(agent, "forkbomb")
    assert got["ok"] is True and got["forked"] < 32, got
    assert got["error"] == "Resource temporarily unavailable"
    calm = await bystander
    assert calm.end is AttemptEnd.COMPLETED and calm.result == {"ok": True, "slept": 1.0}


async def test_a_memory_bomb_fails_naming_the_limit(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, memory_mb=256)
    result = await run(agent, "alloc", 1024)
    assert result.end is AttemptEnd.FAILED
    assert "memory limit of 256 MiB reached" in (result.error or "")
    assert (await attack(agent, "whoami"))["uid"] == NOBODY  # the next attempt runs as usual


async def test_filling_the_disk_stops_the_agent_with_a_clear_error(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, disk_mb=8)
    result = await run(agent, "fill", 1000)
    assert result.end is AttemptEnd.FAILED
    assert result.error is not None
    assert result.error.startswith("disk limit of 8 MiB exceeded"), result.error
    assert not result.retryable
    assert list((tmp_path / "runs").iterdir()) == []  # removed after the attempt


async def test_one_file_past_the_disk_limit_cannot_be_written(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, disk_mb=8, keep_workdir="true")
    result = await run(agent, "bigfile", 64)
    # The write past 8 MiB fails (EFBIG: Python ignores SIGXFSZ) and the agent reports it, or
    # the directory's watch stops it first (the 8 MiB file and task.json are past the limit).
    if result.end is AttemptEnd.COMPLETED:
        assert result.result == {"ok": False, "errno": 27, "error": "File too large"}
    else:
        assert (result.error or "").startswith("disk limit of 8 MiB exceeded"), result.error
    (workdir,) = (tmp_path / "runs").iterdir()
    assert (workdir / "big").stat().st_size <= 8 * 1024 * 1024


def _processes_named(token: str) -> dict[str, int]:
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if token.encode() in f.read().split(b"\0"):
                    found[f"sleeper-{name}"] = int(name)
        except OSError:
            continue
    return found


async def test_a_cancel_kills_the_sandboxed_tree_within_two_seconds(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    token = f"marker-{os.getpid()}-{id(agent)}"
    ctl = control(60)
    attempt = asyncio.create_task(
        agent.run(make_task(payload={"action": "tree", "args": [token]}), ctl)
    )
    for _ in range(500):
        pids = _processes_named(token)
        if len(pids) == 3:
            break
        await asyncio.sleep(0.02)
    assert len(pids) == 3, pids
    ctl.cancel_reason = "stop"
    ctl.cancel.set()
    result = await asyncio.wait_for(attempt, 10)
    assert result.end is AttemptEnd.CANCELLED
    assert await asyncio.to_thread(wait_gone, pids, 2.0) == []
