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

import pytest

from agentqueue import AsyncQueue, TaskState
from agentqueue.heap import SERVING_THRESHOLD
from worker_run import run_until_ended

AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
HERE = Path(__file__).parent


@pytest.mark.parametrize(
    "entry", [[AGENTQUEUE], [sys.executable, "-m", "agentqueue.cli"]], ids=["script", "python-m"]
)
async def test_a_worker_process_runs_its_tasks_with_the_startup_heap_frozen(
    tmp_path: Path, entry: list[str]
) -> None:
    db_url = f"sqlite:///{tmp_path / 'heap.db'}"
    async with AsyncQueue(db_url) as queue:
        task = (await queue.submit({"title": "heap", "task_type": "heap"})).task
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQUEUE_")}
    env.update(AGENTQUEUE_DB=db_url, PYTHONPATH=str(HERE))
    args = [*entry, "worker", "--app", "heap_app:queue", "--until-idle"]
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
    # Both ways in start through agentqueue.launch: the collector was off while the app loaded
    # (the installed script and python -m alike), and the freeze turned it on.
    assert ran.result["collecting_at_import"] is False
    assert ran.result["collecting"] is True


def _launched(code: str) -> str:
    """Run ``code`` in a process of its own; its output (it must succeed)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_the_command_starts_with_the_collector_off_and_turns_it_on_after_its_start() -> None:
    """Whatever the command, the collector is on again STARTUP_SECS after the start (a
    process that never freezes its heap, as a one-shot command or the bench, must not run on
    without it), and the timer that turns it on never holds the process open."""
    out = _launched(
        """
import gc, threading, time
from agentqueue import launch
launch.collector_off_while_starting()
timer = [t for t in threading.enumerate() if t.name == "agentqueue-collector-on"]
print(gc.isenabled(), [t.daemon for t in timer])
time.sleep(launch.STARTUP_SECS + 0.5)
print(gc.isenabled())
"""
    )
    assert out.splitlines() == ["False [True]", "True"]


def test_a_serving_process_turns_the_collector_on_as_it_freezes_its_startup_heap() -> None:
    out = _launched(
        """
import gc
from agentqueue import launch
from agentqueue.heap import freeze_startup_heap
launch.collector_off_while_starting()
freeze_startup_heap()
print(gc.isenabled())
"""
    )
    assert out == "True"


def test_freezing_the_startup_heap_runs_no_collection_and_freezes_the_garbage_with_it() -> None:
    """A collection at that point walked every object the start had built (the collector was
    off) to free a few hundred: it held a worker's loop 28 to 41 ms after its first claim. The
    freeze runs none: the collectors' counts of every generation stay as they were, and a cycle
    left as garbage before it is frozen with the rest instead of freed."""
    out = _launched(
        """
import gc, weakref
from agentqueue import launch
from agentqueue.heap import freeze_startup_heap
launch.collector_off_while_starting()
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a
alive = weakref.ref(a)
del a, b  # a cycle: garbage only a collection frees
before = [s["collections"] for s in gc.get_stats()]
freeze_startup_heap()
after = [s["collections"] for s in gc.get_stats()]
print(before == after, alive() is not None, gc.get_freeze_count() > 1000, gc.isenabled())
"""
    )
    assert out == "True True True True"


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
