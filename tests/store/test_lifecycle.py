"""A task's whole happy path on each backend, with its audit trail."""

from __future__ import annotations

from agentqueue import AsyncQueue, TaskState


async def test_submit_admit_claim_complete_records_every_step(queue: AsyncQueue) -> None:
    created = await queue.submit(title="Fix login", task_type="bugfix", payload={"issue": 12})
    assert created.created and created.task.state is TaskState.PENDING

    admitted = await queue.admit()
    assert [t.id for t in admitted] == [created.task.id]

    [claimed] = await queue.claim(5, "worker-1")
    assert claimed.state is TaskState.EXECUTING
    assert claimed.lock_token is not None and claimed.assigned_to == "worker-1"

    done = await queue.complete(claimed.id, claimed.lock_token, {"patch": "diff"})
    assert done.state is TaskState.COMPLETED and done.result == {"patch": "diff"}
    assert done.lock_token is None and done.finished_at is not None

    events = await queue.events(done.id)
    assert [(e.from_state, e.to_state) for e in events] == [
        (None, TaskState.PENDING),
        (TaskState.PENDING, TaskState.QUEUED),
        (TaskState.QUEUED, TaskState.EXECUTING),
        (TaskState.EXECUTING, TaskState.COMPLETED),
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert (await queue.verify()).ok
