"""A worker process against a PostgreSQL server of its own that stops and restarts, as managed
databases do: it keeps running, records every outcome once, and stops an attempt whose lease it
cannot renew before that lease lapses.

The server is started here with initdb and pg_ctl on a free port (never the shared one); the
tests are skipped where those are not installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from worker_helpers import executions, wait_for

from agentqueue import AsyncQueue, TaskState

HERE = Path(__file__).parent
AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
S = TaskState

pytestmark = pytest.mark.skipif(
    not (PG_BIN / "pg_ctl").exists() or (os.geteuid() == 0 and shutil.which("su") is None),
    reason="needs PostgreSQL 15's initdb and pg_ctl",
)

CONFIG = """
[queue]
lease_ttl_secs = {lease}

[retry]
base = 1.0
cap_secs = 0.2
jitter = 0.0

[worker]
poll_secs = 0.2
grace_secs = 5
"""


class Server:
    """A PostgreSQL server in a temporary directory, on a free port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.run(f"{PG_BIN}/initdb -D {root}/data -A trust -U postgres")

    def run(self, command: str) -> None:
        if os.geteuid() == 0:  # the server refuses to run as root
            subprocess.run(["su", "postgres", "-c", command], check=True, capture_output=True)
        else:
            subprocess.run(command, shell=True, check=True, capture_output=True)

    def ctl(self, action: str, *flags: str) -> None:
        options = f"-o '-p {self.port} -k {self.root}' -l {self.root}/log"
        self.run(f"{PG_BIN}/pg_ctl -D {self.root}/data {options} {' '.join(flags)} -w {action}")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # Not under pytest's own temporary directory: the server runs as another user, who must
    # reach its data directory.
    root = Path(tempfile.mkdtemp(prefix="aq-outage-"))
    os.chmod(root, 0o700)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    try:
        pg = Server(root)
        pg.ctl("start")
        try:
            yield pg
        finally:
            pg.ctl("stop", "-m", "immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def new_database(server: Server, name: str) -> str:
    """An empty database on ``server``; its URL."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + f"/{name}"


def start_worker(url: str, tmp_path: Path, lease: float, *args: str) -> subprocess.Popen[str]:
    config = tmp_path / "agentqueue.toml"
    config.write_text(CONFIG.format(lease=lease))
    environ = {**os.environ, "AGENTQUEUE_DB": url, "AQ_TEST_RECORD": str(tmp_path / "record")}
    environ.pop("AGENTQUEUE_CONFIG", None)
    with (tmp_path / "worker.log").open("w") as out:
        return subprocess.Popen(
            [str(AGENTQUEUE), "--db", url, "--config", str(config), "worker",
             "--app", "worker_app:queue", *args],
            cwd=HERE, env=environ, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip


def stop(worker: subprocess.Popen[str], log: Path) -> None:
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log.read_text()


async def test_a_worker_started_while_the_database_is_down_survives_restarts_and_a_stop(
    server: Server, tmp_path: Path
) -> None:
    url = new_database(server, "outage")
    queue = AsyncQueue(url, config=None)
    await queue.open()
    await queue.submit_many(
        [{"title": f"t{i}", "task_type": "sleep", "payload": {"secs": 0.2}} for i in range(80)]
    )
    await queue.close()
    server.ctl("stop", "-m", "fast")
    worker = start_worker(url, tmp_path, 10, "--concurrency", "8")
    log = tmp_path / "worker.log"
    try:
        await asyncio.sleep(2)
        assert worker.poll() is None, log.read_text()  # waiting for the database, not gone
        server.ctl("start")
        await asyncio.sleep(2)
        server.ctl("restart", "-m", "immediate")  # mid-run: connections cut, outcomes pending
        await asyncio.sleep(1)
        server.ctl("stop", "-m", "fast")  # administrator shutdown while handlers run
        await asyncio.sleep(4)
        assert worker.poll() is None, log.read_text()
        server.ctl("start")
        queue = AsyncQueue(url)
        await queue.open()
        counts = await wait_for(
            queue, lambda c: c[S.COMPLETED] == 80, within=45, what="all 80 to complete"
        )
        assert counts[S.COMPLETED] == 80
        await queue.close()
        stop(worker, log)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    finished = Counter(t for t, _pid, what in executions(tmp_path / "record") if what == "finished")
    assert len(finished) == 80 and set(finished.values()) == {1}, finished.most_common(3)
    assert "database unavailable" in text and "database reachable again" in text
    assert "Traceback" not in text and "died" not in text, text


async def test_heartbeats_failing_past_the_guard_stop_the_attempt_before_its_lease_lapses(
    server: Server, tmp_path: Path
) -> None:
    url = new_database(server, "guard")
    queue = AsyncQueue(url)
    await queue.open()
    task = (await queue.submit(title="long", task_type="sleep", payload={"secs": 600})).task
    worker = start_worker(url, tmp_path, 4, "--concurrency", "1")
    log = tmp_path / "worker.log"
    record = tmp_path / "record"
    try:
        await wait_for(queue, lambda c: c[S.EXECUTING] == 1, what="the task to run")
        await queue.close()
        server.ctl("stop", "-m", "fast")
        stopped_at = time.monotonic()
        # The lease (4 s) was renewed at most 4/3 s before the stop; the guard (0.8) stops the
        # attempt at most 3.2 s after the last renewal, so before the lease lapses.
        for _ in range(100):
            if "cancelled" in [w for _t, _p, w in executions(record)]:
                break
            await asyncio.sleep(0.1)
        cancelled_after = time.monotonic() - stopped_at
        assert "stopping 1 running attempt" in log.read_text(), log.read_text()
        assert cancelled_after < 4.0, cancelled_after
        server.ctl("start")
        queue = AsyncQueue(url)
        await queue.open()
        # Once the lease lapsed, the scheduler takes the task back and it runs again.
        await wait_for(
            queue,
            lambda c: c[S.EXECUTING] == 1 and len(executions(record)) >= 3,
            within=30,
            what="the task to run again",
        )
        again = await queue.get(task.id)
        assert again.retry_count == 1
        await queue.close()
        assert worker.poll() is None, log.read_text()
    finally:
        worker.kill()
        worker.wait()
    # One attempt at a time: ran, cancelled (by the guard), ran again.
    assert [w for _t, _p, w in executions(record)] == ["ran", "cancelled", "ran"]
