"""R5 and R1 under load on each backend: worker processes claiming from one queue at once never
claim a task twice, leave none behind, and keep the audit log whole."""

from __future__ import annotations

import json
import multiprocessing
import random
from multiprocessing.synchronize import Barrier
from pathlib import Path

import agentqueue
from agentqueue import AsyncQueue, Outcome, OutcomeKind, Task, TaskState

TASKS = 10_000


def _work(
    url: str, worker: str, batch: int, use_complete: bool, barrier: Barrier, out: str
) -> None:
    """A separate process: claim and complete until nothing is left, writing what it claimed."""
    claimed: list[str] = []
    q = agentqueue.Queue(url)
    try:
        q.open()
        barrier.wait(timeout=120)
        tasks = q.claim(batch, worker)
        # Every process holds its first batch before any takes a second: SQLite's lock is not
        # fair, and on a busy machine one process could otherwise sleep in its busy handler
        # while the others drain the queue, so the race would have fewer parties than it says.
        barrier.wait(timeout=120)
        while tasks:
            claimed.extend(str(t.id) for t in tasks)
            for t in tasks:
                if t.state is not TaskState.EXECUTING or t.assigned_to != worker:
                    raise AssertionError(f"claimed {t.id} in state {t.state} for {t.assigned_to}")
            if use_complete:
                for t in tasks:
                    assert t.lock_token is not None
                    q.complete(t.id, t.lock_token, {"by": worker})
            else:
                outcomes = [
                    Outcome(t.id, t.lock_token, OutcomeKind.COMPLETED, result={"by": worker})
                    for t in tasks
                    if t.lock_token is not None
                ]
                done = q.finish(outcomes)
                refused = [str(r) for r in done.values() if not isinstance(r, Task)]
                if refused:
                    raise AssertionError(f"refused: {refused[:3]}")
            tasks = q.claim(batch, worker)
    except BaseException:
        barrier.abort()  # the others stop waiting at once
        raise
    finally:
        Path(out).write_text(json.dumps(claimed))
        q.close()


async def test_worker_processes_claim_every_task_exactly_once(db_url: str, tmp_path: Path) -> None:
    processes = 4 if db_url.startswith("sqlite:") else 8
    rng = random.Random(7)
    async with AsyncQueue(db_url) as queue:
        results = await queue.submit_many(
            {"title": f"task {i}", "task_type": "test", "priority": rng.randrange(1, 10)}
            for i in range(TASKS)
        )
        expected = {str(r.task.id) for r in results}
        assert len(expected) == TASKS
        # Admitted as they were submitted (nothing holds them back).
        assert all(r.task.state is TaskState.QUEUED for r in results)

        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(processes)
        files = [tmp_path / f"claimed-{i}.json" for i in range(processes)]
        procs = [
            ctx.Process(
                target=_work,
                args=(db_url, f"worker-{i}", 50 + 7 * i, i == 0, barrier, str(files[i])),
            )
            for i in range(processes)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=240)
            if p.is_alive():
                p.kill()
        assert [p.exitcode for p in procs] == [0] * processes

        per_worker = [json.loads(f.read_text()) for f in files]
        claimed = [task_id for ids in per_worker for task_id in ids]
        assert len(claimed) == len(set(claimed)), "a task was claimed twice"
        assert set(claimed) == expected
        # Every worker took part, so the claims really raced.
        assert all(per_worker), [len(ids) for ids in per_worker]

        stats = await queue.stats()
        assert stats.by_state[TaskState.COMPLETED] == TASKS and stats.total == TASKS
        report = await queue.verify()
        assert report.ok, report.breaks[:3]
        assert (report.tasks, report.events) == (TASKS, 4 * TASKS)

        # Each task was completed by the worker that claimed it.
        owner = {task_id: f"worker-{i}" for i, ids in enumerate(per_worker) for task_id in ids}
        sample = rng.sample(sorted(expected), 50)
        for task_id in sample:
            task = await queue.get(task_id)
            assert task.result == {"by": owner[task_id]}
            claims = [e for e in await queue.events(task_id) if e.action == "claim"]
            assert [e.actor for e in claims] == [owner[task_id]]
