"""Tool calls a task makes while it waits (R9): how they are named."""

from __future__ import annotations


def next_tool_call_id(calls_so_far: int) -> str:
    """The id of a task's next tool call, given how many it has made in its whole life:
    ``call-1``, ``call-2``, ... Unique within the task, and the same on every worker."""
    return f"call-{calls_so_far + 1}"
