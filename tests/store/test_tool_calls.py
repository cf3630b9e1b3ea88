"""Tool calls (R9) on each backend, step by step on the manual clock: waiting frees the lease,
results are fenced by call id, tool runners take each call once, and a call that times out is
retried, then dead-lettered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner

from agentqueue import AsyncQueue, ManualClock, Task, TaskState
from agentqueue.cli import main
from agentqueue.domain.errors import TransitionRefused
from agentqueue.service.execution import Outcome, OutcomeKind
from agentqueue.service.tools import take_tool_calls

S = TaskState


async def wait_on_tool(
    queue: AsyncQueue, name: str = "search", secs: float = 30, **more: Any
) -> Task:
    """Claim the one queued task and end its attempt waiting on tool ``name``."""
    [claimed] = await queue.claim(1, "w")
    assert claimed.lock_token is not None
    call = {"id": f"call-{len(claimed.tool_calls) + 1}", "name": name,
            "args": {"q": "why"}, "timeout_secs": secs}  # fmt: skip
    outcome = Outcome(
        claimed.id, claimed.lock_token, OutcomeKind.WAITING_TOOL, tool_call=call,
        claimed=claimed, **more,
    )  # fmt: skip
    done = await queue.finish([outcome])
    task = done[claimed.id]
    assert isinstance(task, Task)
    return task


async def test_waiting_frees_the_lease_and_keeps_checkpoint_and_call(queue: AsyncQueue) -> None:
    made = await queue.submit(title="research", task_type="agent")
    await queue.admit()
    task = await wait_on_tool(queue, checkpoint={"step": 2}, checkpointed=True)
    assert task.state is S.WAITING_TOOL and task.lock_token is None and task.assigned_to is None
    assert task.checkpoint == {"step": 2}
    [call] = task.tool_calls
    assert (call["id"], call["name"], call["args"], call["state"], call["result"]) == (
        "call-1", "search", {"q": "why"}, "waiting", None,
    )  # fmt: skip
    assert await queue.claim(5, "w") == []  # no slot is taken while it waits
    answered = await queue.submit_tool_result(made.task.id, "call-1", {"hits": 3})
    assert answered.state is S.QUEUED and answered.checkpoint == {"step": 2}
    assert answered.tool_calls[0]["state"] == "done"
    assert answered.tool_calls[0]["result"] == {"hits": 3}
    shown = (await queue.get(made.task.id)).to_json()["tool_calls"][0]
    assert {"id", "name", "args", "state", "result"} <= shown.keys()
    [again] = await queue.claim(1, "w")  # the next run resumes with checkpoint and results
    assert again.checkpoint == {"step": 2} and again.tool_calls[0]["result"] == {"hits": 3}
    assert (await queue.verify()).ok


async def test_a_result_for_a_call_not_awaited_is_refused(queue: AsyncQueue) -> None:
    made = await queue.submit(title="research", task_type="agent")
    await queue.admit()
    await wait_on_tool(queue)
    with pytest.raises(TransitionRefused, match="no tool call call-9"):
        await queue.submit_tool_result(made.task.id, "call-9", {"x": 1})
    await queue.submit_tool_result(made.task.id, "call-1", {"x": 1})
    with pytest.raises(TransitionRefused, match="not awaited"):
        await queue.submit_tool_result(made.task.id, "call-1", {"x": 2})  # already answered
    assert (await queue.get(made.task.id)).tool_calls[0]["result"] == {"x": 1}


async def test_a_tool_timeout_retries_then_dead_letters(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    made = await queue.submit(title="research", task_type="agent", max_retries=1)
    await queue.admit()
    await wait_on_tool(queue, secs=30)
    clock.advance(seconds=29)
    assert (await queue.tick()).reclaimed == 0  # not yet
    clock.advance(seconds=2)
    await queue.tick()
    task = await queue.get(made.task.id)
    assert (task.state, task.retry_count) == (S.QUEUED, 1)
    assert task.tool_calls[0]["state"] == "timed_out"
    with pytest.raises(TransitionRefused, match="not awaited"):  # a late answer
        await queue.submit_tool_result(made.task.id, "call-1", {"late": True})
    await wait_on_tool(queue, secs=30)  # the retry waits on a new call
    clock.advance(seconds=31)
    await queue.tick()
    task = await queue.get(made.task.id)
    assert task.state is S.DEAD_LETTER and task.retry_count == 1
    assert [c["state"] for c in task.tool_calls] == ["timed_out", "timed_out"]
    assert "timed out" in (task.error or "")


async def test_tool_runners_take_each_call_once_until_their_lease_lapses(
    queue: AsyncQueue, clock: ManualClock
) -> None:
    for i in range(6):
        await queue.submit(title=f"t{i}", task_type="agent")
    await queue.admit()
    for i in range(6):
        await wait_on_tool(queue, name="search" if i % 2 == 0 else "fetch")
    rt = await queue.runtime()
    one, two = await asyncio.gather(
        take_tool_calls(rt, ["search"], "r1", 10, lease_secs=60),
        take_tool_calls(rt, ["search"], "r2", 10, lease_secs=60),
    )
    taken = [w.task_id for w in [*one, *two]]
    assert len(taken) == 3 and len(set(taken)) == 3  # only search calls, each once
    assert await take_tool_calls(rt, ["search"], "r3", 10, lease_secs=60) == []
    clock.advance(seconds=61)  # the runners died: their calls can be taken again
    again = await take_tool_calls(rt, ["search"], "r3", 10, lease_secs=60)
    assert sorted(w.task_id for w in again) == sorted(taken)
    for work in again:
        await queue.submit_tool_result(work.task_id, work.call_id, {"ok": work.args})
    assert (await queue.stats()).by_state[S.QUEUED] == 3


def test_the_tool_result_command_answers_a_waiting_task(db_url: str) -> None:
    async def setup() -> str:
        async with AsyncQueue(db_url) as q:
            made = await q.submit(title="research", task_type="agent")
            await wait_on_tool(q)
            return str(made.task.id)

    task_id = asyncio.run(setup())
    runner = CliRunner()
    bad = runner.invoke(main, ["--db", db_url, "tool-result", task_id, "call-1", "--result", "{"])
    assert bad.exit_code == 2 and "result" in bad.stderr
    ok = runner.invoke(
        main, ["--db", db_url, "tool-result", task_id, "call-1", "--result", '{"a": 1}', "--json"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["state"] == "queued"
    again = runner.invoke(
        main, ["--db", db_url, "tool-result", task_id, "call-1", "--result", '{"a": 2}']
    )
    assert again.exit_code == 1 and "not awaited" in again.stderr
