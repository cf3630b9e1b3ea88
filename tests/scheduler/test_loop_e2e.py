"""The scheduler loop inside a real worker process runs the timed steps too: a P0 task that
dead-letters there produces exactly one alert at a local webhook receiver."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from scheduler_helpers import Hook, spawn

from agentqueue import AsyncQueue, TaskState

AGENT = "import sys; sys.exit(75)"  # a retryable failure, every time


async def test_a_p0_dead_letter_in_a_worker_alerts_once(db_url: str, tmp_path: Path) -> None:
    hook = Hook()
    hook.thread.start()
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        f"""
[scheduler]
tick_secs = 0.2
leader_ttl_secs = 2
renew_secs = 0.5

[worker]
poll_secs = 0.2
workdir = "{tmp_path / "runs"}"

[alerts]
url = "{hook.url}"

[agents.payer]
command = ["{sys.executable}", "-c", "{AGENT}"]
task_types = ["payment"]
"""
    )
    worker = spawn(["--db", db_url, "--config", str(config), "worker"], tmp_path / "worker.log")
    try:
        async with AsyncQueue(db_url, config=config) as queue:
            made = await queue.submit(
                title="refund 991", task_type="payment", priority="P0",
                idempotency_key="refund-991", max_retries=0,
            )  # fmt: skip
            for _ in range(300):  # up to 30 s
                if hook.bodies:
                    break
                await asyncio.sleep(0.1)
            assert (await queue.get(made.task.id)).state is TaskState.DEAD_LETTER
            await asyncio.sleep(1.5)  # several more passes of the timed steps
            assert len(hook.bodies) == 1
            assert hook.bodies[0]["task_id"] == str(made.task.id)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        hook.server.shutdown()
        hook.server.server_close()
    log = (tmp_path / "worker.log").read_text()
    assert "ERROR" in log and str(made.task.id) in log
