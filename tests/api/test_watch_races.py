"""The API's task watcher and event stream when a task moves between the reads a request makes,
as on a busy server: a waiter is woken by a move it did not see, even one the watcher read
before the waiter came, and a stream whose task ends between its first two reads still sends
every event and ends. Real store on each backend; the watcher and the stream in this process."""

from __future__ import annotations

import asyncio
import json
import uuid

from agentqueue import AsyncQueue, Task
from agentqueue.api.routes import _event_stream
from agentqueue.api.watch import TaskWatcher

BOUND_SECS = 30.0
"""A generous bound on a wake-up the watcher owes within one read (it reads every 10 ms
here); the stream's keep-alive, 15 s, comes first, so a stream left waiting fails too."""


async def _run_and_complete(queue: AsyncQueue, kind: str) -> Task:
    """Admit, claim and complete the one task of ``kind``; the completed task."""
    await queue.admit()
    [got] = await queue.claim(1, "watch-test", task_types=[kind])
    assert got.lock_token is not None
    return await queue.complete(got.id, got.lock_token, {"ok": True})


async def _no() -> bool:
    return False


async def test_a_waiter_that_read_a_task_before_a_move_the_watcher_has_seen_is_woken_at_once(
    queue: AsyncQueue,
) -> None:
    kind = f"watch-{uuid.uuid4().hex[:8]}"
    before = (await queue.submit(title="watched", task_type=kind)).task
    watcher = TaskWatcher(await queue.runtime(), interval=0.01)
    watcher.start()
    try:
        with watcher.watching(before.id, before.event_seq) as first:
            after = await _run_and_complete(queue, kind)

            async def read_to_the_end() -> None:  # the watcher has read every move
                while (
                    seen := watcher.latest(before.id)
                ) is None or seen.event_seq < after.event_seq:
                    await first.wait()
                    first.clear()

            await asyncio.wait_for(read_to_the_end(), BOUND_SECS)
            # A second request read the task before it moved and comes to wait only now.
            with watcher.watching(before.id, before.event_seq) as late:
                assert late.is_set(), "a waiter behind the watcher was left waiting"
            # One that read it as it is now is not woken for nothing.
            with watcher.watching(before.id, after.event_seq) as current:
                assert not current.is_set()
    finally:
        await watcher.stop()


async def test_a_stream_whose_task_ends_between_its_two_reads_sends_every_event_and_ends(
    queue: AsyncQueue,
) -> None:
    kind = f"stream-{uuid.uuid4().hex[:8]}"
    made = (await queue.submit(title="streamed", task_type=kind)).task
    rt = await queue.runtime()
    first = await queue.events(made.id)  # the route reads the events, ...
    await _run_and_complete(queue, kind)  # ... the task ends meanwhile, ...
    task = await queue.get(made.id)  # ... then it reads the task, ended
    assert task.terminal and task.event_seq > first[-1].seq
    watcher = TaskWatcher(rt, interval=0.01)
    watcher.start()
    try:

        async def whole() -> list[str]:
            return [c async for c in _event_stream(watcher, _no, rt, task, None, first)]

        chunks = await asyncio.wait_for(whole(), BOUND_SECS)
    finally:
        await watcher.stop()
    sent = [json.loads(c.split("data: ", 1)[1]) for c in chunks if c.startswith("id: ")]
    events = await queue.events(made.id)
    assert [e["seq"] for e in sent] == [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sent[-1]["action"] == "complete"
