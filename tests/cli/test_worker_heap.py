"""A worker process started by the CLI puts its startup heap out of the cyclic collector's
reach once it has started (agentqueue.heap: a tenth of a draining worker's samples were the
collector walking the modules, settings and executors again) and collects less often from then
on (agentqueue.heap.SERVING_THRESHOLD); a worker run by the library, in someone else's process,
leaves that process's collector as it was."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from pathlib import Path

from agentqueue import AsyncQueue, TaskState
from agentqueue.heap import SERVING_THRESHOLD
from worker_run import run_until_ended

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
HERE = Path(__file__).parent


async def test_a_worker_process_runs_its_tasks_with_the_startup_heap_frozen(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'heap.db'}"
    async with AsyncQueue(db_url) as queue:
        task = (await queue.submit({"title": "heap", "task_type": "heap"})).task
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    env.update(AGENTQUEUE_DB=db_url, PYTHONPATH=str(HERE))
    args = [AGENTQUEUE, "worker", "--app", "heap_app:queue", "--until-idle"]
    done = await asyncio.to_thread(
        subprocess.run, args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    async with AsyncQueue(db_url) as queue:
        ran = await queue.get(task.id)
    assert ran.state is TaskState.COMPLETED, ran.error
    # The modules alone are thousands of objects; an unfrozen process reports 0.
    assert ran.result["frozen"] > 1000
    # The youngest generation is collected every 20,000 allocations, not Python's 700.
    assert ran.result["threshold"] == list(SERVING_THRESHOLD) != list(gc.get_threshold())


async def test_a_worker_run_in_process_leaves_the_collector_alone(tmp_path: Path) -> None:
    before = gc.get_freeze_count()
    threshold = gc.get_threshold()
    async with AsyncQueue(f"sqlite:///{tmp_path / 'heap.db'}") as queue:

        @queue.handler("heap")
        async def heap(task: object, ctx: object) -> dict[str, int]:
            return {"frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold())}

        task = (await queue.submit({"title": "heap", "task_type": "heap"})).task
        await run_until_ended(queue, [task.id], concurrency=2)
        ran = await queue.get(task.id)
    assert ran.state is TaskState.COMPLETED, ran.error
    assert ran.result == {"frozen": before, "threshold": list(threshold)}
    assert gc.get_freeze_count() == before and gc.get_threshold() == threshold
