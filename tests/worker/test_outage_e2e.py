"""A worker process against a PostgreSQL server of its own that stops and restarts, as managed
databases do: it keeps running, records every outcome once, and stops an attempt whose lease it
cannot renew before that lease lapses.

The server is the module's own (the ``pg`` fixture: initdb and pg_ctl on a free port, never the
shared server).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from worker_helpers import executions, wait_for

from agentqueue import AsyncQueue, TaskState
from fast_config import fast_config
from pg_instance import PgInstance

HERE = Path(__file__).parent
AGENTQUEUE = Path(sys.executable).with_name("agentqueue")
S = TaskState


def start_worker(url: str, tmp_path: Path, lease: float, *args: str) -> subprocess.Popen[str]:
    config = tmp_path / "agentqueue.toml"
    config.write_text(fast_config(lease_secs=lease))
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
    pg: PgInstance, tmp_path: Path
) -> None:
    url = pg.create_database("outage")
    queue = AsyncQueue(url, config=None)
    await queue.open()
    await queue.submit_many(
        [{"title": f"t{i}", "task_type": "sleep", "payload": {"secs": 0.2}} for i in range(80)]
    )
    await queue.close()
    pg.stop("fast")
    worker = start_worker(url, tmp_path, 10, "--concurrency", "8")
    log = tmp_path / "worker.log"
    try:
        await asyncio.sleep(2)
        assert worker.poll() is None, log.read_text()  # waiting for the database, not gone
        pg.start()
        await asyncio.sleep(2)
        pg.restart("immediate")  # mid-run: connections cut, outcomes pending
        await asyncio.sleep(1)
        pg.stop("fast")  # administrator shutdown while handlers run
        await asyncio.sleep(4)
        assert worker.poll() is None, log.read_text()
        pg.start()
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
    pg: PgInstance, tmp_path: Path
) -> None:
    url = pg.create_database("guard")
    queue = AsyncQueue(url)
    await queue.open()
    task = (await queue.submit(title="long", task_type="sleep", payload={"secs": 600})).task
    worker = start_worker(url, tmp_path, 4, "--concurrency", "1")
    log = tmp_path / "worker.log"
    record = tmp_path / "record"
    try:
        await wait_for(queue, lambda c: c[S.EXECUTING] == 1, what="the task to run")
        await queue.close()
        pg.stop("fast")
        # The lease (4 s) was renewed at most 4/3 s before the stop; the guard (0.8) stops the
        # attempt 3.2 s after the last renewal it sent, so before the lease lapses.
        for _ in range(300):
            if "cancelled" in [w for _t, _p, w in executions(record)]:
                break
            await asyncio.sleep(0.1)
        text = log.read_text()
        guarded = re.search(r"stopping 1 running attempt.*not renewed for ([0-9.]+) s", text)
        assert guarded is not None, text
        assert float(guarded.group(1)) < 4.0, guarded.group(0)  # by the worker's own clock
        pg.start()
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
