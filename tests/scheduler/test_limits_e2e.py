"""Caps across real worker processes (R12): four workers, each running the scheduler and
competing for the leadership, command agents that record when they run, and retries. Never
more tasks running than the global cap, nor per agent than its cap."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from scheduler_helpers import max_overlap, spawn

from agentqueue import AsyncQueue, TaskState
from fast_config import fast_config

AGENT = Path(__file__).with_name("limits_agent.py")


def runs(record: Path) -> list[tuple[str, str, float, float]]:
    """(task id, type, start, end) of every agent run."""
    open_runs: dict[str, tuple[str, float]] = {}
    done = []
    for line in record.read_text().splitlines():
        task_id, task_type, what, at = line.split()
        if what == "start":
            open_runs[task_id] = (task_type, float(at))
        else:
            kind, start = open_runs.pop(task_id)
            done.append((task_id, kind, start, float(at)))
    assert not open_runs, "an agent run never ended"
    return done


async def test_four_workers_never_exceed_the_global_or_agent_caps(
    db_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        fast_config(lease_secs=5, grace_secs=None)
        + f"""workdir = "{tmp_path / "runs"}"
run_as = "root"

[admission]
max_active = 3

[agents.slow]
command = ["{sys.executable}", "{AGENT}"]
task_types = ["slow"]
max_concurrent = 2
extra_rw = ["{tmp_path}"]

[agents.quick]
command = ["{sys.executable}", "{AGENT}"]
task_types = ["quick"]
max_concurrent = 2
extra_rw = ["{tmp_path}"]
"""
    )
    record = tmp_path / "runs.log"
    async with AsyncQueue(db_url, config=config) as queue:
        await queue.submit_many(
            [
                {"title": f"slow {i}", "task_type": "slow",
                 "payload": {"record": str(record), "flaky": i % 4 == 0, "sleep": 0.4}}
                for i in range(16)
            ]
            + [
                {"title": f"quick {i}", "task_type": "quick",
                 "payload": {"record": str(record), "sleep": 0.1}}
                for i in range(8)
            ]
        )  # fmt: skip
        workers = [
            spawn(
                [
                    "--db",
                    db_url,
                    "--config",
                    str(config),
                    "worker",
                    "--id",
                    f"w{n}",
                    "--until-idle",
                ],
                tmp_path / f"worker-{n}.log",
            )
            for n in range(4)
        ]
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                counts = (await queue.stats()).by_state
                if counts[TaskState.COMPLETED] == 24:
                    break
                await asyncio.sleep(0.2)
            assert counts[TaskState.COMPLETED] == 24, counts
        finally:
            for proc in workers:
                if proc.poll() is None:
                    proc.terminate()
            for proc in workers:
                proc.wait(timeout=30)
        done = runs(record)
        assert len(done) == 24 + 4  # four flaky tasks ran twice
        retried = (await queue.list(task_type="slow", limit=100)).items
        assert sum(t.retry_count == 1 for t in retried) == 4
        all_runs = [(s, e) for _, _, s, e in done]
        slow_runs = [(s, e) for _, kind, s, e in done if kind == "slow"]
        quick_runs = [(s, e) for _, kind, s, e in done if kind == "quick"]
        assert max_overlap(all_runs) <= 3
        assert max_overlap(slow_runs) <= 2 and max_overlap(quick_runs) <= 2
        # The caps were reached, not merely respected by a queue that ran one at a time.
        assert max_overlap(all_runs) == 3, done
