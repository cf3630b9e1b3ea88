"""Waiting on tools and preemption with real worker processes, on SQLite and PostgreSQL (R9, R11).

The handlers are in worker_app.py: ``steps`` runs N steps, each after the tool call the previous
one made, checkpointing as it goes; ``double`` is a tool the workers' tool runners run;
``background`` is long work that checkpoints in small steps; ``urgent`` is a P0 task.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from worker_helpers import executions, wait_for

from agentqueue import AsyncQueue, TaskState

S = TaskState


def steps_run(record_file: Path, task_id: str) -> list[str]:
    return [what for tid, _pid, what in executions(record_file) if tid == task_id]


async def test_a_five_step_handler_with_four_tool_calls_runs_each_step_once(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    made = await live_queue.submit(title="five steps", task_type="steps", payload={"steps": 5})
    start_worker("--concurrency", "2")
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 1, within=60, what="completion")
    task = await live_queue.get(made.task.id)
    # 1 -> call 2 -> +2 = 4 -> call 8 -> +3 = 11 -> 22 -> +4 = 26 -> 52 -> +5 = 57
    assert task.result == {"done": 5, "total": 57}
    assert steps_run(record_file, str(task.id)) == ["step1", "step2", "step3", "step4", "step5"]
    assert [c["id"] for c in task.tool_calls] == ["call-1", "call-2", "call-3", "call-4"]
    assert all(c["state"] == "done" and c["name"] == "double" for c in task.tool_calls)
    assert [c["result"]["total"] for c in task.tool_calls] == [2, 8, 22, 52]
    actions = [e.action for e in await live_queue.events(task.id)]
    assert actions.count("wait_tool") == 4 and actions.count("tool_result") == 4
    assert actions.count("claim") == 5  # one attempt per step; no retries
    assert task.retry_count == 0 and (await live_queue.verify()).ok


async def test_a_worker_killed_while_its_task_waits_loses_nothing(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    made = await live_queue.submit(
        title="manual tools", task_type="steps", payload={"steps": 3, "tool": "by-hand"}
    )
    first = start_worker("--concurrency", "1")
    await wait_for(live_queue, lambda c: c[S.WAITING_TOOL] == 1, within=30, what="a tool wait")
    first.signal(signal.SIGKILL)
    first.wait()
    task = await live_queue.get(made.task.id)
    assert task.checkpoint == {"done": 1, "total": 1} and task.lock_token is None
    # The result arrives while no worker runs: the task is queued and waits for one.
    [call] = task.tool_calls
    await live_queue.submit_tool_result(task.id, call["id"], {"total": call["args"]["total"] * 2})
    assert (await live_queue.get(task.id)).state is S.QUEUED
    start_worker("--concurrency", "1")
    for _ in range(2):
        await wait_for(live_queue, lambda c: c[S.WAITING_TOOL] == 1 or c[S.COMPLETED] == 1,
                       within=30, what="the next tool wait")  # fmt: skip
        task = await live_queue.get(made.task.id)
        if task.state is S.COMPLETED:
            break
        waiting = task.tool_calls[-1]
        await live_queue.submit_tool_result(
            task.id, waiting["id"], {"total": waiting["args"]["total"] * 2}
        )
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 1, within=30, what="completion")
    task = await live_queue.get(made.task.id)
    assert task.result == {"done": 3, "total": 11}
    assert steps_run(record_file, str(task.id)) == ["step1", "step2", "step3"]


async def test_a_p0_task_takes_the_slot_of_a_long_background_task(
    live_queue: AsyncQueue, start_worker, record_file: Path
) -> None:
    slow = await live_queue.submit(
        title="reindex", task_type="background", priority="P2",
        payload={"steps": 60, "step_secs": 0.1},
    )  # fmt: skip
    start_worker("--concurrency", "1")
    await wait_for(live_queue, lambda c: c[S.EXECUTING] == 1, within=30, what="the slow task")
    await asyncio.sleep(3.5)  # it has run for more than 3 s
    p0 = await live_queue.submit(
        title="refund 991", task_type="urgent", priority="P0", idempotency_key="refund-991"
    )
    await wait_for(live_queue, lambda c: c[S.COMPLETED] == 2, within=60, what="both done")
    urgent = await live_queue.get(p0.task.id)
    assert urgent.started_at is not None
    waited = (urgent.started_at - urgent.created_at).total_seconds()
    assert waited < 1.0, f"the P0 task waited {waited:.2f}s for a slot"
    background = await live_queue.get(slow.task.id)
    assert background.retry_count == 0 and background.result == {"done": 60}
    runs = [w for w in steps_run(record_file, str(background.id)) if w.startswith("run-from-")]
    assert runs[0] == "run-from-0" and len(runs) == 2 and runs[1] != "run-from-0"
    actions = [e.action for e in await live_queue.events(background.id)]
    assert "preempt" in actions and "fail" not in actions


@pytest.fixture
def agent_config(tmp_path: Path, config_file: Path) -> Path:
    """The workers' config plus the example resumable command agent."""
    agent = Path(__file__).parents[2] / "examples" / "agents" / "tool_agent.py"
    config = tmp_path / "agents.toml"
    config.write_text(
        config_file.read_text()
        + f"""
workdir = "{tmp_path / "runs"}"

[agents.researcher]
command = ["{sys.executable}", "{agent}"]
task_types = ["research"]
"""
    )
    return config


async def test_a_command_agent_resumes_from_its_checkpoint_each_step_once(
    db_url: str, start_worker, agent_config: Path
) -> None:
    config = agent_config
    async with AsyncQueue(db_url, config=config) as queue:
        made = await queue.submit(title="look into login", task_type="research")
        start_worker("--concurrency", "2", config=config)
        await wait_for(queue, lambda c: c[S.COMPLETED] == 1, within=60, what="completion")
        task = await queue.get(made.task.id)
        assert task.result == {
            "found": [{"hits": [f"result for {q}"]}
                      for q in ("login bug", "session timeout", "password reset")]
        }  # fmt: skip
        assert task.checkpoint == {"step": 3} and task.retry_count == 0
        assert [c["name"] for c in task.tool_calls] == ["search"] * 3
        stderr = "".join(r.text for r in await queue.logs(task.id) if r.stream == "stderr")
        for step in (1, 2, 3):
            assert stderr.count(f"step {step}:") == 1, stderr
