"""R12 under load: under a global cap alone, claims admit what they take (Settings.claims_admit),
and worker processes claiming at once never take more than the cap leaves, nor a task twice."""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path

import agentqueue
from agentqueue import AsyncQueue, TaskState
from agentqueue.config import Settings

CAP = 150
TASKS = 1_500
PROCESSES = 8


def _claim_until_full(url: str, worker: str, batch: int, barrier: Barrier, out: str) -> None:
    """A separate process: claim (never completing) until a claim comes back empty twice."""
    claimed: list[str] = []
    q = agentqueue.Queue(url, settings=Settings(admission={"max_active": CAP}))
    try:
        q.open()
        barrier.wait(timeout=120)
        empty = 0
        while empty < 2:
            tasks = q.claim(batch, worker)
            empty = 0 if tasks else empty + 1
            claimed.extend(str(t.id) for t in tasks)
    except BaseException:
        barrier.abort()
        raise
    finally:
        Path(out).write_text(json.dumps(claimed))
        q.close()


async def test_processes_claiming_under_a_cap_take_exactly_what_it_leaves(
    db_url: str, tmp_path: Path
) -> None:
    settings = Settings(admission={"max_active": CAP})
    assert settings.claims_admit
    async with AsyncQueue(db_url, settings=settings) as queue:
        results = await queue.submit_many(
            {"title": f"task {i}", "task_type": "test", "priority": 1 + i % 9} for i in range(TASKS)
        )
        assert {r.task.state for r in results} == {TaskState.PENDING}
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(PROCESSES)
        files = [tmp_path / f"claimed-{i}.json" for i in range(PROCESSES)]
        procs = [
            ctx.Process(
                target=_claim_until_full,
                args=(db_url, f"worker-{i}", 7 + 3 * i, barrier, str(files[i])),
            )
            for i in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=240)
        assert [p.exitcode for p in procs] == [0] * PROCESSES
        claimed = [i for f in files for i in json.loads(f.read_text())]
        assert len(claimed) == len(set(claimed)) == CAP
        counts = await queue.store.count_by_state()
        assert counts == {TaskState.EXECUTING: CAP, TaskState.PENDING: TASKS - CAP}
        # Each claimed task was admitted and claimed by the one worker, its chain whole.
        assert (await queue.verify()).ok
