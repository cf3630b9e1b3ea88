"""Waiting on tools (R9): results from people, the API or tool runners; tool runners taking
calls; tool calls that time out.

A task waits in waiting_tool holding no slot. A result is taken only for the call the task
awaits (TOOL_RESULT is fenced by the call id), and queues the task again: its next run resumes
from its checkpoint with the recorded results.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from ..domain.errors import InvalidInput, NotFound
from ..domain.models import Task
from ..domain.states import TOOL_RUNNING, TOOL_WAITING, Action, Request
from .execution import checked_result
from .records import decide_and_apply, retry_due
from .runtime import Runtime

MAX_TOOL_RESULT_BYTES = 1024 * 1024


async def submit_tool_result(
    rt: Runtime,
    task_id: UUID,
    call_id: str,
    result: Any,
    *,
    actor: str,
    tenant: str | None = None,
) -> Task:
    """Answer tool call ``call_id`` of a waiting task; the task is queued again. Refused
    (TransitionRefused) when that call is not awaited any more."""
    checked_result(result, MAX_TOOL_RESULT_BYTES)
    if not call_id:
        raise InvalidInput("must name the tool call", "call_id")
    now = rt.clock.now()
    async with rt.store.transaction() as tx:
        tasks = await tx.lock([task_id], tenant)
        if not tasks:
            raise NotFound(f"no task {task_id}")
        written, refusals = await decide_and_apply(
            tx,
            tasks,
            lambda t: Request(
                Action.TOOL_RESULT, now, actor=actor, tool_call_id=call_id, result=result
            ),
        )
    if refusals:
        raise refusals[task_id].error()
    return written[0]


async def time_out_tool_calls(rt: Runtime, limit: int = 500) -> list[Task]:
    """Tasks whose awaited tool call timed out: queued again as a retry, or dead_letter when no
    retries are left."""
    return await retry_due(
        rt, Action.TOOL_TIMEOUT, lambda tx, now: tx.lock_tool_timeouts(now, limit)
    )


@dataclass(frozen=True)
class ToolWork:
    """A tool call a runner has taken (for ``lease_secs``)."""

    task_id: UUID
    tenant: str
    call_id: str
    name: str
    args: Any


async def take_tool_calls(
    rt: Runtime, names: list[str], runner: str, limit: int, lease_secs: float
) -> list[ToolWork]:
    """Take up to ``limit`` awaited calls of these tools for ``runner``: each is marked running
    with a lease, so no other runner takes it unless this one dies."""
    if not names or limit <= 0:
        return []
    now = rt.clock.now()
    until = (now + timedelta(seconds=lease_secs)).timestamp()
    taken: list[ToolWork] = []
    async with rt.store.transaction() as tx:
        for task in await tx.lock_tool_work(names, now, limit):
            calls = list(task.tool_calls)
            for index, call in enumerate(calls):
                lapsed = call.get("state") == TOOL_RUNNING and call.get("lease_until_ts", 0) <= (
                    now.timestamp()
                )
                if call.get("name") in names and (call.get("state") == TOOL_WAITING or lapsed):
                    calls[index] = {
                        **call,
                        "state": TOOL_RUNNING,
                        "runner": runner,
                        "lease_until_ts": until,
                    }
                    if await tx.set_tool_calls(task, calls):
                        taken.append(
                            ToolWork(task.id, task.tenant, str(call["id"]), call["name"],
                                     call.get("args"))
                        )  # fmt: skip
                    break
    return taken
