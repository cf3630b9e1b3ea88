"""The result: result.json if written, else the last non-blank stdout line as JSON; 1 MiB max."""

from __future__ import annotations

from agent_harness import RunAgent

from agentqueue.executors.base import AttemptEnd


async def test_last_non_blank_stdout_line_is_the_result(run_agent: RunAgent) -> None:
    result = await run_agent("print", "thinking...", "print", '{"fixed": true}', "print", "  ")
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"fixed": True}


async def test_last_line_without_a_newline_counts(run_agent: RunAgent) -> None:
    result = await run_agent("print", "log", "raw", "[1, 2, 3]")
    assert result.result == [1, 2, 3]


async def test_a_last_line_written_in_pieces_is_put_together(run_agent: RunAgent) -> None:
    result = await run_agent(
        "raw", '{"pieces": ', "sleep", "0.05", "raw", "[1, ", "sleep", "0.05", "raw", "2]}\n\n"
    )
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"pieces": [1, 2]}


async def test_result_json_file_wins_over_stdout(run_agent: RunAgent) -> None:
    result = await run_agent("result", '{"from": "file"}', "print", '{"from": "stdout"}')
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result == {"from": "file"}


async def test_invalid_result_json_file_fails(run_agent: RunAgent) -> None:
    result = await run_agent("result", "{oops", "print", '{"from": "stdout"}')
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert (result.error or "").startswith("result.json is not valid JSON: ")


async def test_no_output_and_no_result_file_completes_with_none(run_agent: RunAgent) -> None:
    result = await run_agent("eprint", "only stderr")
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert result.result is None


async def test_last_line_that_is_not_json_fails_quoting_it(run_agent: RunAgent) -> None:
    result = await run_agent("print", "All done, the bug is fixed!")
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    error = result.error or ""
    assert "output was not JSON" in error
    assert "All done, the bug is fixed!" in error


async def test_a_long_garbage_line_is_quoted_short(run_agent: RunAgent) -> None:
    result = await run_agent("long-line", "5000")
    assert "output was not JSON" in (result.error or "")
    assert len(result.error or "") < 300


async def test_nan_is_not_json(run_agent: RunAgent) -> None:
    result = await run_agent("print", "NaN")
    assert result.end is AttemptEnd.FAILED
    assert "not JSON" in (result.error or "")


async def test_a_stdout_result_over_one_mib_fails(run_agent: RunAgent) -> None:
    result = await run_agent("big-line", str(1024 * 1024 + 10), max_output_bytes=4 * 1024 * 1024)
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert "larger than 1 MiB" in (result.error or "")


async def test_a_result_json_over_one_mib_fails(run_agent: RunAgent) -> None:
    result = await run_agent("result-big", str(1024 * 1024 + 10))
    assert result.end is AttemptEnd.FAILED
    assert not result.retryable
    assert "result.json is larger than 1 MiB" in (result.error or "")


async def test_a_result_just_under_one_mib_is_accepted(run_agent: RunAgent) -> None:
    result = await run_agent("result-big", str(1024 * 1024 - 100))
    assert result.end is AttemptEnd.COMPLETED, result.error
    assert len(result.result) == 1024 * 1024 - 100


async def test_a_failed_exit_ignores_the_result(run_agent: RunAgent) -> None:
    result = await run_agent("result", '{"ok": true}', "exit", "1")
    assert result.end is AttemptEnd.FAILED
    assert result.result is None


async def test_a_result_over_the_input_bounds_fails_naming_the_bound(run_agent: RunAgent) -> None:
    """A last line nested past 512 levels (the JSON decoder's recursion once ended the attempt
    in a RecursionError) or a whole number of thousands of digits (Python's int limit, a
    ValueError that once read as "not JSON"): the attempt fails, not retried, saying which."""
    deep = await run_agent("print", "[" * 10_000 + "]" * 10_000)
    assert deep.end is AttemptEnd.FAILED and not deep.retryable
    assert deep.error == "the agent's result (its last line): is nested more than 512 levels deep"
    huge = await run_agent("result", '{"n": ' + "7" * 5000 + "}", "print", "{}")
    assert huge.end is AttemptEnd.FAILED and not huge.retryable
    assert huge.error == "result.json: a whole number of 5000 digits, over 100"
