"""A networked agent cannot reach the cloud metadata address: the worker's cgroup v2 BPF filter
refuses the connection at once (EPERM), while the rest of the network stays reachable.

The attacker agent (tests/executors/attacker.py) runs under bubblewrap as ``nobody``, built the
way a worker builds it; the worker here runs as root on a host with cgroup v2, so the filter must
be there (never skipped)."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import http.server
import ipaddress
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_isolation_adversarial import ATTACKER, DATABASE, attack
from test_isolation_adversarial import make_agent as make_attacker

from agentqueue import AsyncQueue
from agentqueue.config import Settings
from agentqueue.executors.netfilter import NetFilterShare
from agentqueue.executors.subprocess import CommandAgent
from agentqueue.worker.assemble import database_places

EPERM = errno.EPERM


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator[Callable[..., CommandAgent]]:
    """Build attacker agents (keyword arguments are agent settings), closed after the test."""
    made: list[CommandAgent] = []

    def make(**fields: Any) -> CommandAgent:
        agent = make_attacker(tmp_path, **fields)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


def with_filter(agent: CommandAgent, share: NetFilterShare, **changes: Any) -> CommandAgent:
    """The same agent, but with the filter of ``share`` (and other ``changes`` to its
    confinement)."""
    confinement = dataclasses.replace(agent.confinement, net_filter=share.get(), **changes)
    return CommandAgent(agent.name, agent.settings, agent.workdir_root, confinement=confinement)


@pytest.fixture
def web() -> Iterator[Callable[[str], int]]:
    """Start local HTTP servers: ``web(host)`` gives the port of one listening on ``host``."""
    servers: list[http.server.ThreadingHTTPServer] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello from {self.server.server_address[0]}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    def start(host: str) -> int:
        server = http.server.ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


async def test_the_metadata_address_is_refused_and_the_web_is_not(
    make_agent: Callable[..., CommandAgent], web: Callable[[str], int]
) -> None:
    agent = make_agent(network="true")
    assert agent.confinement.net_filter is not None, agent.confinement.net_filter_problem
    port = web("127.0.0.1")
    assert await attack(agent, "http", "127.0.0.1", port) == {
        "ok": True,
        "body": "hello from 127.0.0.1",
    }
    for address in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"):
        got = await attack(agent, "connect", address, 80)
        assert got["ok"] is False and got["errno"] == EPERM, (address, got)
        got = await attack(agent, "connect", address, 8080)  # any port
        assert got["ok"] is False and got["errno"] == EPERM, (address, got)
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"):
        got = await attack(agent, "udp", address, 53)
        assert got["ok"] is False and got["errno"] == EPERM, (address, got)


async def test_an_address_on_the_deny_list_is_refused_and_reachable_without_it(
    make_agent: Callable[..., CommandAgent], web: Callable[[str], int]
) -> None:
    """The filter is what refuses: a second loopback address with a real server on it is
    reachable by an agent whose filter denies the metadata address only, and refused by one
    whose filter denies it too."""
    other = web("127.0.0.2")
    local = web("127.0.0.1")
    plain = make_agent(network="true")
    got = await attack(plain, "http", "127.0.0.2", other)
    assert got == {"ok": True, "body": "hello from 127.0.0.2"}, got
    denied = with_filter(plain, NetFilterShare(["127.0.0.2"]))
    try:
        got = await attack(denied, "http", "127.0.0.2", other)
        assert got["ok"] is False and got["errno"] == EPERM, got
        got = await attack(denied, "udp", "127.0.0.2", other)
        assert got["ok"] is False and got["errno"] == EPERM, got
        got = await attack(denied, "http", "127.0.0.1", local)
        assert got == {"ok": True, "body": "hello from 127.0.0.1"}, got
    finally:
        denied.close()
    assert denied.confinement.net_filter is not None
    assert not denied.confinement.net_filter.path.exists()  # its last user let go


async def test_the_databases_address_and_port_are_refused_too(
    make_agent: Callable[..., CommandAgent],
) -> None:
    """The worker denies the PostgreSQL server's address and port as well (Landlock refuses
    the port first, with EACCES; without Landlock's rule, the filter refuses it)."""
    assert database_places(DATABASE).endpoints == [("127.0.0.1", 5432)]
    agent = make_agent(network="true")
    assert agent.confinement.net_filter is not None
    assert (ipaddress.ip_address("127.0.0.1"), 5432) in agent.confinement.net_filter.rules
    got = await attack(agent, "connect", "127.0.0.1", 5432)
    assert got["ok"] is False and got["errno"] == errno.EACCES, got
    no_landlock = with_filter(
        agent, NetFilterShare(database_places(DATABASE).endpoints), deny_ports=()
    )
    try:
        got = await attack(no_landlock, "connect", "127.0.0.1", 5432)
        assert got["ok"] is False and got["errno"] == EPERM, got
    finally:
        no_landlock.close()


def test_database_urls_give_their_address_when_it_is_one() -> None:
    assert database_places("postgresql://u@db.example:6543/q").endpoints == []
    assert database_places("postgresql://u@[::1]:6543/q").endpoints == [("::1", 6543)]
    assert database_places("postgresql://u@10.0.0.5/q").endpoints == [("10.0.0.5", 5432)]
    assert database_places("sqlite:///tmp/q.db").endpoints == []


async def test_the_workers_filter_is_removed_when_the_worker_stops(tmp_path: Path) -> None:
    settings = Settings(
        worker={"poll_secs": 0.1, "workdir": str(tmp_path / "runs")},
        queue={"lease_ttl_secs": 5},
        agents={
            "attacker": {
                "command": [sys.executable, str(ATTACKER)],
                "task_types": ["probe"],
                "isolation": "bwrap",
                "network": True,
            }
        },
    )
    queue = AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}", settings=settings)
    worker = queue.worker(run_scheduler=True, grace_secs=5)
    (agent,) = worker.executors
    assert isinstance(agent, CommandAgent)
    net_filter = agent.confinement.net_filter
    assert net_filter is not None, agent.confinement.net_filter_problem
    assert net_filter.path.name.startswith(f"agentqueue-{os.getpid()}-net")
    running = asyncio.create_task(worker.run())
    try:
        payload = {"action": "connect", "args": ["169.254.169.254", "80"]}
        made = (await queue.submit(title="probe", task_type="probe", payload=payload)).task
        deadline = time.monotonic() + 30
        while not (task := await queue.get(made.id)).state.terminal:
            assert time.monotonic() < deadline, task.state
            await asyncio.sleep(0.05)
        assert task.result == {"ok": False, "errno": EPERM, "error": "Operation not permitted"}
        assert net_filter.path.is_dir()
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
        await queue.close()
    assert not net_filter.path.exists()


_BUILD = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
from agentqueue.config import Settings
from agentqueue.domain.errors import ConfigError
from agentqueue.worker.assemble import build_executors
agent = {"command": ["/bin/true"], "task_types": ["t"], "network": True}
if sys.argv[1] != "unset":
    agent["isolation"] = sys.argv[1]
try:
    (built,) = build_executors(Settings(agents={"fetcher": agent}), {}, concurrency=1)
    print("built", built.confinement.bwrap, built.confinement.net_filter is None)
except ConfigError as exc:
    print("refused", exc)
"""


@pytest.mark.parametrize("isolation", ["unset", "bwrap"])
def test_without_cgroup_v2_a_networked_agent_warns_or_is_refused(isolation: str) -> None:
    """A worker that sees no cgroup v2 hierarchy (unmounted in a mount namespace of its own)
    warns naming the agent, or refuses an explicit isolation = "bwrap" naming the field."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    script = f'umount {_cgroup2_mounts()} && exec {sys.executable} -c "$0" {isolation}'
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, _BUILD],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    if isolation == "unset":
        assert "built True True" in done.stdout, done.stdout
        assert "the cloud metadata address (169.254.169.254 and fd00:ec2::254) is REACHABLE" in (
            done.stdout
        )
        assert "fetcher (no cgroup v2 hierarchy is mounted)" in done.stdout
    else:
        assert done.stdout.startswith("refused agents.fetcher.network: the cloud metadata"), (
            done.stdout
        )


def _cgroup2_mounts() -> str:
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    points = [line.split()[4] for line in lines if " - cgroup2 " in line]
    assert points, "no cgroup v2 mount here"
    return " ".join(points)
