"""Resource limits bite, and the error names the limit."""

from __future__ import annotations

import pytest
from agent_harness import RunAgent

from agentqueue.executors.base import AttemptEnd


async def test_memory_limit_stops_an_agent_allocating_past_it(run_agent: RunAgent) -> None:
    within = await run_agent("alloc", "20", "print", "1", memory_mb=200)
    assert within.end is AttemptEnd.COMPLETED, within.error
    result = await run_agent("alloc", "400", "print", "1", memory_mb=200)
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    error = result.error or ""
    assert error.startswith("exit code 1 (memory limit of 200 MiB reached)")
    assert "MemoryError" in error


async def test_cpu_limit_kills_an_agent_burning_past_it(run_agent: RunAgent) -> None:
    result = await run_agent("burn", "10", "print", "1", cpu_secs=1)
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert result.error == "agent killed by SIGXCPU (CPU time limit of 1s exceeded)"


# The CPU time used is known only unsandboxed: bubblewrap's init ends without reaping
# the agent, so its usage never reaches the launcher and a SIGKILL at the hard limit goes
# unnamed under bwrap (SIGXCPU, the soft limit, is named either way).
@pytest.mark.host_processes
async def test_cpu_limit_kills_an_agent_that_ignores_sigxcpu(run_agent: RunAgent) -> None:
    result = await run_agent("ignore", "SIGXCPU", "burn", "10", "print", "1", cpu_secs=1)
    assert result.end is AttemptEnd.FAILED
    assert result.error == "agent killed by SIGKILL (CPU time limit of 1s exceeded)"


async def test_open_files_limit_stops_an_agent_opening_too_many(run_agent: RunAgent) -> None:
    within = await run_agent("open-files", "10", "print", "1", open_files=32)
    assert within.end is AttemptEnd.COMPLETED, within.error
    result = await run_agent("open-files", "100", "print", "1", open_files=32)
    assert result.end is AttemptEnd.FAILED
    error = result.error or ""
    assert error.startswith("exit code 1 (open file limit of 32 reached)")
    assert "Too many open files" in error
