"""Captured output: both streams read at once, each capped at max_output_bytes (head kept), the
agent never blocked, the last stdout line tracked apart from the cap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent_harness import HOST, RunAgent, agent_settings, control

from agentqueue.executors.base import AttemptEnd, LogChunk


def _logs(chunks: tuple[LogChunk, ...]) -> dict[str, LogChunk]:
    return {chunk.stream: chunk for chunk in chunks}


async def test_stdout_and_stderr_are_returned_as_log_chunks(run_agent: RunAgent) -> None:
    result = await run_agent("eprint", "warming up", "print", "step 1", "print", '{"n": 1}')
    assert result.end is AttemptEnd.COMPLETED, result.error
    logs = _logs(result.logs)
    assert logs["stdout"] == LogChunk("stdout", 'step 1\n{"n": 1}\n', truncated=False)
    assert logs["stderr"] == LogChunk("stderr", "warming up\n", truncated=False)


async def test_output_is_decoded_as_utf8_with_replacement(run_agent: RunAgent) -> None:
    result = await run_agent("rawbytes", "6f6bff0a", "print", "é")
    assert result.end is AttemptEnd.FAILED  # the last line "é" is not JSON
    assert _logs(result.logs)["stdout"].text == "ok\ufffd\né\n"


async def test_flood_on_both_streams_is_capped_keeps_the_head_and_the_last_line(
    run_agent: RunAgent,
) -> None:
    cap = 64 * 1024
    result = await run_agent(
        "print",
        "first line",
        "flood",
        str(8 * 1024 * 1024),
        "both",
        "print",
        '{"after": "flood"}',
        max_output_bytes=cap,
        control_=control(20),
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"after": "flood"}
    logs = _logs(result.logs)
    for stream in ("stdout", "stderr"):
        assert logs[stream].truncated
        assert len(logs[stream].text.encode()) <= cap
    assert logs["stdout"].text.startswith("first line\nxxxx")
    assert logs["stderr"].text.startswith("xxxx")


async def test_output_under_the_cap_is_not_marked_truncated(run_agent: RunAgent) -> None:
    result = await run_agent("flood", "4096", "stderr", max_output_bytes=8192)
    assert result.end is AttemptEnd.COMPLETED, result.error
    stderr = _logs(result.logs)["stderr"]
    assert not stderr.truncated
    assert len(stderr.text) == 4096


async def test_last_line_longer_than_max_output_bytes_is_a_failure(run_agent: RunAgent) -> None:
    result = await run_agent("long-line", "5000", max_output_bytes=2048)
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert "longer than max_output_bytes" in (result.error or "")


def test_a_gigantic_flood_holds_bounded_memory_in_the_worker(tmp_path: Path) -> None:
    flood = 512 * 1024 * 1024
    config = {
        "settings": agent_settings(
            "flood", str(flood), "stdout", "print", "[1, 2]", max_output_bytes=64 * 1024
        ).model_dump(),
        "workdir_root": str(tmp_path / "runs"),
        "deadline_secs": 60,
    }
    done = subprocess.run(
        [sys.executable, str(HOST), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["end"] == "completed", report
    assert report["result"] == [1, 2]
    assert report["logs"]["stdout"] == [64 * 1024, True]
    grown_mb = (report["maxrss_after_kb"] - report["maxrss_before_kb"]) / 1024
    assert grown_mb < 64, f"the worker grew by {grown_mb:.0f} MiB reading a 512 MiB flood"
