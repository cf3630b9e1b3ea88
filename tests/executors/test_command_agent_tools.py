"""Resumable command agents: checkpoint and tool_call lines on stdout, the resume files, and
yielding the slot on SIGUSR1 (R9, R11)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_harness import RunAgent, control, exists, make_task, wait_for_pids, wait_gone

from agentqueue.executors.base import AttemptEnd, ToolCallRequest
from agentqueue.executors.capture import LastLine

ROOT = Path(__file__).resolve().parents[2]
TOOL_AGENT = ROOT / "examples" / "agents" / "tool_agent.py"


def checkpoint(value: Any) -> str:
    return json.dumps({"checkpoint": value})


def tool_call(**call: Any) -> str:
    return json.dumps({"tool_call": call})


class Saves:
    """A ``save_checkpoint`` that records what it saved, slowly, and how many ran at once."""

    def __init__(self, delay: float = 0.1, answer: bool = True) -> None:
        self.saved: list[Any] = []
        self.delay = delay
        self.answer = answer
        self.running = 0
        self.most_at_once = 0
        self.first = asyncio.Event()

    async def __call__(self, value: Any) -> bool:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(self.delay)
            self.saved.append(value)
            self.first.set()
            return self.answer
        finally:
            self.running -= 1


# --- checkpoints ----------------------------------------------------------------------------------


async def test_latest_checkpoint_is_saved_and_carried_and_not_the_result(
    run_agent: RunAgent,
) -> None:
    saves = Saves(delay=0.6)
    result = await run_agent(
        "print",
        '{"answer": 42}',
        "print",
        checkpoint({"step": 1}),
        "sleep",
        "0.1",
        "print",
        checkpoint({"step": 2}),
        "sleep",
        "0.1",
        "print",
        checkpoint({"step": 3}),
        control_=control(save_checkpoint=saves),
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"answer": 42}  # protocol lines are never the result
    assert (result.checkpoint, result.checkpointed) == ({"step": 3}, True)
    # The first is saved at once; the two printed during that save make one save: the latest.
    assert saves.saved == [{"step": 1}, {"step": 3}]
    assert saves.most_at_once == 1


async def test_a_checkpoint_is_saved_while_the_agent_runs(run_agent: RunAgent) -> None:
    saves = Saves(delay=0.0)
    attempt = asyncio.create_task(
        run_agent(
            "print", checkpoint(["early"]), "sleep", "30", control_=control(save_checkpoint=saves)
        )
    )
    await asyncio.wait_for(saves.first.wait(), 10)
    assert saves.saved == [["early"]]
    assert not attempt.done()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt


async def test_a_refused_save_does_not_stop_the_agent(run_agent: RunAgent) -> None:
    saves = Saves(delay=0.0, answer=False)
    result = await run_agent(
        "print", checkpoint(1), "print", '"done"', control_=control(save_checkpoint=saves)
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert (result.result, result.checkpoint, result.checkpointed) == ("done", 1, True)


async def test_without_checkpoint_lines_nothing_is_checkpointed(run_agent: RunAgent) -> None:
    result = await run_agent("print", '{"checkpoint": 1, "other": 2}')
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"checkpoint": 1, "other": 2}  # two keys: not a protocol line
    assert (result.checkpoint, result.checkpointed) == (None, False)


@pytest.mark.parametrize(
    ("actions", "end"),
    [
        (("exit", "3"), AttemptEnd.FAILED),
        (("exit", "75"), AttemptEnd.FAILED),
        (("print", "not json"), AttemptEnd.FAILED),
        (("sleep", "30"), AttemptEnd.TIMED_OUT),
    ],
    ids=["failed", "retryable", "bad-result", "timed-out"],
)
async def test_every_outcome_carries_the_latest_checkpoint(
    run_agent: RunAgent, actions: tuple[str, ...], end: AttemptEnd
) -> None:
    result = await run_agent(
        "print",
        checkpoint({"n": 1}),
        "print",
        checkpoint({"n": 2}),
        *actions,
        kill_grace_secs=0.2,
        control_=control(1.5),
    )
    assert result.end is end, result.error
    assert (result.checkpoint, result.checkpointed) == ({"n": 2}, True)


@pytest.mark.host_processes
async def test_a_cancelled_attempt_carries_its_checkpoint(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(30)
    attempt = asyncio.create_task(
        run_agent("print", checkpoint("half"), "pid", str(pids_file), "sleep", "30", control_=ctl)
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    ctl.stop("cancelled by a test")
    result = await attempt
    assert result.end is AttemptEnd.CANCELLED
    assert (result.checkpoint, result.checkpointed) == ("half", True)


async def test_a_protocol_line_written_in_pieces_counts(run_agent: RunAgent) -> None:
    result = await run_agent(
        "raw",
        '{"check',
        "sleep",
        "0.05",
        "raw",
        'point": {"at": ',
        "sleep",
        "0.05",
        "raw",
        '7}}\n"done"\n',
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert (result.result, result.checkpoint) == ("done", {"at": 7})


def test_last_line_hands_protocol_lines_over_across_chunks() -> None:
    seen: list[bytes] = []

    def protocol(line: bytes) -> bool:
        seen.append(line)
        return json.loads(line).keys() == {"checkpoint"}

    lines = LastLine(1024, protocol)
    for piece in (b'"a"\n{"chec', b'kpoint": 1}\n', b"plain\n", b'  {"checkpoint"', b": 2}  "):
        lines.feed(piece)
    lines.close()
    assert seen == [b'{"checkpoint": 1}', b'{"checkpoint": 2}']
    assert lines.line == b"plain"


def test_last_line_without_protocol_keeps_protocol_looking_lines() -> None:
    lines = LastLine(1024)
    lines.feed(b'1\n{"checkpoint": 1}\n')
    assert lines.line == b'{"checkpoint": 1}'


# --- tool calls -----------------------------------------------------------------------------------


async def test_tool_call_then_success_waits_for_the_tool(run_agent: RunAgent) -> None:
    result = await run_agent(
        "print",
        checkpoint({"step": 1}),
        "print",
        tool_call(name="search", args={"q": "login bug"}, timeout_secs=30),
        "result",
        '{"ignored": true}',
    )
    assert result.end is AttemptEnd.WAITING_TOOL, result.error
    assert result.tool_call == ToolCallRequest("search", {"q": "login bug"}, 30.0)
    assert (result.checkpoint, result.checkpointed) == ({"step": 1}, True)
    assert result.result is None


async def test_tool_call_without_args_or_timeout(run_agent: RunAgent) -> None:
    result = await run_agent("print", tool_call(name="ci:run-tests.v2"))
    assert result.end is AttemptEnd.WAITING_TOOL, result.error
    assert result.tool_call == ToolCallRequest("ci:run-tests.v2", None, None)
    assert result.checkpointed is False


async def test_tool_call_then_a_failing_exit_fails(run_agent: RunAgent) -> None:
    result = await run_agent("print", tool_call(name="search"), "exit", "75")
    assert result.end is AttemptEnd.FAILED
    assert result.retryable
    assert result.tool_call is None


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (tool_call(args={"q": 1}), "tool_call.name: required"),
        (tool_call(name=""), "tool_call.name: must be 1-64 characters"),
        (tool_call(name="x" * 65), "tool_call.name: must be 1-64 characters"),
        (tool_call(name="-search"), "tool_call.name: must be 1-64 characters"),
        (tool_call(name="web search"), "tool_call.name: must be 1-64 characters"),
        (tool_call(name=7), "tool_call.name: must be 1-64 characters"),
        (tool_call(name="s", timeout_secs=0), "tool_call.timeout_secs: must be a positive"),
        (tool_call(name="s", timeout_secs=-1), "tool_call.timeout_secs: must be a positive"),
        (tool_call(name="s", timeout_secs="60"), "tool_call.timeout_secs: must be a positive"),
        (tool_call(name="s", timeout_secs=True), "tool_call.timeout_secs: must be a positive"),
        (
            tool_call(name="s", timeout_secs=7 * 86_400 + 1),
            "tool_call.timeout_secs: must be a positive",
        ),
        (tool_call(name="s", timeout=5), "tool_call.timeout: unknown field"),
        ('{"tool_call": "search"}', "tool_call: must be an object"),
    ],
)
async def test_a_bad_tool_call_fails_naming_the_field(
    run_agent: RunAgent, line: str, error: str
) -> None:
    result = await run_agent("print", line)
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert (result.error or "").startswith(error), result.error
    assert result.tool_call is None


async def test_a_long_tool_name_of_64_and_a_timeout_of_7_days_are_accepted(
    run_agent: RunAgent,
) -> None:
    result = await run_agent("print", tool_call(name="a" * 64, timeout_secs=7 * 86_400))
    assert result.end is AttemptEnd.WAITING_TOOL, result.error
    assert result.tool_call == ToolCallRequest("a" * 64, None, 7 * 86_400.0)


async def test_two_tool_calls_in_one_attempt_fail(run_agent: RunAgent) -> None:
    result = await run_agent(
        "print", checkpoint(1), "print", tool_call(name="a"), "print", tool_call(name="b")
    )
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert (result.error or "").startswith("tool_call: a second tool call"), result.error
    assert (result.checkpoint, result.checkpointed) == (1, True)


async def test_a_bad_protocol_line_stops_the_agent_at_once(run_agent: RunAgent) -> None:
    started = time.monotonic()
    result = await run_agent("print", tool_call(name=""), "sleep", "30", control_=control(30))
    assert result.end is AttemptEnd.FAILED
    assert (result.error or "").startswith("tool_call.name:")
    assert time.monotonic() - started < 5


# --- resume files ---------------------------------------------------------------------------------


async def test_resume_files_hold_the_checkpoint_and_the_tool_results(
    run_agent: RunAgent,
) -> None:
    calls = (
        {
            "id": "call-1",
            "name": "search",
            "args": {"q": "login"},
            "state": "done",
            "result": {"hits": ["a.py"]},
            "timeout_secs": 600.0,
            "requested_at": "2026-03-01T09:00:00+00:00",
        },
        {"id": "call-2", "name": "ci", "args": None, "state": "timed_out", "result": None},
    )
    task = make_task().evolve(checkpoint={"step": 2, "notes": "naïve"}, tool_calls=calls)
    result = await run_agent("resume", task=task)
    assert result.end is AttemptEnd.COMPLETED, result.error
    seen = result.result
    assert seen["AGENTQUEUE_CHECKPOINT"]["content"] == {"step": 2, "notes": "naïve"}
    assert seen["AGENTQUEUE_TOOL_RESULTS"]["content"] == {
        "call-1": {
            "name": "search",
            "args": {"q": "login"},
            "state": "done",
            "result": {"hits": ["a.py"]},
        },
        "call-2": {"name": "ci", "args": None, "state": "timed_out", "result": None},
    }
    assert Path(seen["AGENTQUEUE_CHECKPOINT"]["path"]).name == "checkpoint.json"
    assert Path(seen["AGENTQUEUE_TOOL_RESULTS"]["path"]).name == "tool_results.json"


async def test_resume_files_of_a_fresh_task_are_null_and_empty(run_agent: RunAgent) -> None:
    result = await run_agent("resume")
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result["AGENTQUEUE_CHECKPOINT"]["content"] is None
    assert result.result["AGENTQUEUE_TOOL_RESULTS"]["content"] == {}


# --- yielding the slot (preemption) ---------------------------------------------------------------


@pytest.mark.host_processes
async def test_an_agent_that_checkpoints_on_sigusr1_is_preempted_quickly(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    saves = Saves(delay=0.0)
    ctl = control(30, yield_grace_secs=10, save_checkpoint=saves)
    attempt = asyncio.create_task(
        run_agent(
            "print",
            checkpoint({"step": 1}),
            "on-usr1",
            checkpoint({"step": 3}),
            "pid",
            str(pids_file),
            "sleep",
            "30",
            control_=ctl,
        )
    )
    pids = await asyncio.to_thread(wait_for_pids, pids_file, "agent", "launcher")
    asked = time.monotonic()
    ctl.request_yield()
    result = await asyncio.wait_for(attempt, 5)
    assert time.monotonic() - asked < 2  # not the 10 s grace
    # It exited 0, yet it yielded: its work is not finished.
    assert result.end is AttemptEnd.PREEMPTED, result.error
    assert (result.checkpoint, result.checkpointed) == ({"step": 3}, True)
    assert saves.saved[-1] == {"step": 3}
    assert wait_gone(pids, 1.0) == []


@pytest.mark.host_processes
async def test_an_agent_without_a_handler_dies_of_sigusr1_and_is_preempted(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(30, yield_grace_secs=10)
    attempt = asyncio.create_task(
        run_agent("print", checkpoint("so far"), "pid", str(pids_file), "sleep", "30", control_=ctl)
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    asked = time.monotonic()
    ctl.request_yield()
    result = await asyncio.wait_for(attempt, 5)
    assert time.monotonic() - asked < 2
    assert result.end is AttemptEnd.PREEMPTED, result.error
    assert (result.checkpoint, result.checkpointed) == ("so far", True)


@pytest.mark.host_processes
async def test_an_agent_that_ignores_sigusr1_is_stopped_after_the_grace(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    where = str(pids_file)
    ctl = control(30, yield_grace_secs=0.5)
    attempt = asyncio.create_task(
        run_agent(
            "ignore",
            "SIGUSR1",
            "ignore",
            "SIGTERM",
            "pid",
            where,
            "grandchild",
            where,
            "hide",
            where,
            "sleep",
            "30",
            kill_grace_secs=0.2,
            control_=ctl,
        )
    )
    pids = await asyncio.to_thread(wait_for_pids, pids_file, "agent", "launcher", "grandchild")
    pids.update(await asyncio.to_thread(wait_for_pids, pids_file, "hidden"))
    asked = time.monotonic()
    ctl.request_yield()
    result = await asyncio.wait_for(attempt, 5)
    elapsed = time.monotonic() - asked
    assert result.end is AttemptEnd.PREEMPTED, result.error
    assert 0.5 <= elapsed < 3
    assert await asyncio.to_thread(wait_gone, pids, 1.0) == []


@pytest.mark.host_processes
async def test_a_tool_call_before_yielding_still_waits_for_the_tool(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(30, yield_grace_secs=10)
    attempt = asyncio.create_task(
        run_agent(
            "print",
            tool_call(name="search"),
            "on-usr1",
            checkpoint(2),
            "pid",
            str(pids_file),
            "sleep",
            "30",
            control_=ctl,
        )
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    ctl.request_yield()
    result = await asyncio.wait_for(attempt, 5)
    assert result.end is AttemptEnd.WAITING_TOOL, result.error
    assert result.tool_call == ToolCallRequest("search")
    assert result.checkpoint == 2


@pytest.mark.host_processes
async def test_a_cancel_during_the_yield_grace_wins(run_agent: RunAgent, tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(30, yield_grace_secs=10)
    attempt = asyncio.create_task(
        run_agent("ignore", "SIGUSR1", "pid", str(pids_file), "sleep", "30", control_=ctl)
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    ctl.request_yield()
    await asyncio.sleep(0.3)
    ctl.stop("cancelled during the yield")
    result = await asyncio.wait_for(attempt, 3)
    assert (result.end, result.error) == (AttemptEnd.CANCELLED, "cancelled during the yield")


@pytest.mark.host_processes
async def test_the_deadline_during_the_yield_grace_times_out(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    ctl = control(1.5, yield_grace_secs=10)
    attempt = asyncio.create_task(
        run_agent(
            "ignore",
            "SIGUSR1",
            "pid",
            str(pids_file),
            "sleep",
            "30",
            kill_grace_secs=0.2,
            control_=ctl,
        )
    )
    await asyncio.to_thread(wait_for_pids, pids_file, "agent")
    ctl.request_yield()
    result = await asyncio.wait_for(attempt, 5)
    assert result.end is AttemptEnd.TIMED_OUT
    assert result.retryable


async def test_a_yield_asked_before_the_start_runs_nothing(
    run_agent: RunAgent, runs_root: Path
) -> None:
    ctl = control(30)
    ctl.request_yield()
    result = await run_agent("print", "1", control_=ctl)
    assert result.end is AttemptEnd.PREEMPTED
    assert result.checkpointed is False
    assert not exists(runs_root)


# --- the example agent ----------------------------------------------------------------------------


async def test_the_example_tool_agent_runs_step_by_step(run_agent: RunAgent) -> None:
    command = [sys.executable, str(TOOL_AGENT)]
    task = make_task()
    result = await run_agent(command=command, task=task)
    steps = 0
    while result.end is AttemptEnd.WAITING_TOOL:
        steps += 1
        assert result.checkpointed and result.tool_call is not None
        assert result.tool_call.name == "search"
        call = {
            "id": f"call-{len(task.tool_calls) + 1}",
            "name": result.tool_call.name,
            "args": result.tool_call.args,
            "state": "done",
            "result": f"hit {steps}",
        }
        task = task.evolve(checkpoint=result.checkpoint, tool_calls=(*task.tool_calls, call))
        result = await run_agent(command=command, task=task)
        assert steps < 10
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert steps == 3
    assert result.result == {"found": ["hit 1", "hit 2", "hit 3"]}
