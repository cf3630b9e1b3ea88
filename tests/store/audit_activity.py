"""What the audit tests share: a little activity on a queue whose chains then verify."""

from __future__ import annotations

from agentqueue import AsyncQueue, ManualClock, Task


async def activity(queue: AsyncQueue, clock: ManualClock) -> list[Task]:
    """Three tasks with four events each (submit, admit, claim, end), one of them failed and
    retried; every chain verifies."""
    tasks = [
        (await queue.submit(title=f"t{i}", task_type="bugfix", payload={"n": i})).task
        for i in range(3)
    ]
    await queue.admit()
    claimed = await queue.claim(3, "worker-1")
    clock.advance(1)
    for task in claimed:
        if task.title == "t1":
            await queue.fail(task.id, task.lock_token, "flaky")
        else:
            await queue.complete(task.id, task.lock_token, {"done": task.title})
    report = await queue.verify()
    assert report.ok and (report.tasks, report.events) == (3, 12), report
    return sorted(tasks, key=lambda t: t.id)
