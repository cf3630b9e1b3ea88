"""Handlers for the worker tests, loaded by real worker processes with --app worker_app:queue.

Every execution appends "<task id> <pid>" to the file named by AQ_TEST_RECORD (if set), so tests
can count how many times each task actually ran.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from agentqueue import AsyncQueue, Fatal, Retryable, Task, TaskContext

queue = AsyncQueue(os.environ.get("AGENTQUEUE_DB"))


def record(task: Task, what: str = "ran") -> None:
    path = os.environ.get("AQ_TEST_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(f"{task.id} {os.getpid()} {what}\n")


@queue.handler("sleep")
async def sleep(task: Task, ctx: TaskContext) -> dict[str, Any]:
    record(task)
    ctx.log(f"sleeping {ctx.payload['secs']}s")
    try:
        await asyncio.sleep(float(ctx.payload["secs"]))
    except asyncio.CancelledError:
        record(task, "cancelled")
        raise
    record(task, "finished")
    return {"slept": ctx.payload["secs"], "tenant": ctx.tenant}


@queue.handler("sync_sleep")
def sync_sleep(task: Task, ctx: TaskContext) -> dict[str, Any]:
    record(task)
    deadline = time.monotonic() + float(ctx.payload["secs"])
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.01)
    record(task, "cancelled" if ctx.cancelled else "finished")
    return {"slept": ctx.payload["secs"]}


@queue.handler("echo")
async def echo(task: Task, ctx: TaskContext) -> dict[str, Any]:
    record(task)
    await asyncio.sleep(float(ctx.payload.get("secs", 0)))
    # Mutating the payload must not reach any other task.
    seen = dict(ctx.payload)
    ctx.payload["mutated_by"] = str(task.id)
    return {"task_id": str(task.id), "tenant": ctx.tenant, "payload": seen}


@queue.handler("fail")
def fail(task: Task, ctx: TaskContext) -> None:
    record(task)
    if ctx.payload.get("retryable"):
        raise Retryable(f"try again ({ctx.attempt})")
    raise Fatal("cannot be done")


@queue.handler("fail_once")
def fail_once(task: Task, ctx: TaskContext) -> str:
    if ctx.attempt == 1:
        raise Retryable("first attempt fails")
    return "second attempt"


@queue.handler("bad_result")
def bad_result(task: Task, ctx: TaskContext) -> Any:
    return {"not json": object()}


# --- waiting on tools, checkpoints and preemption ---------------------------------------------


@queue.tool("double")
async def double(args: dict[str, Any]) -> dict[str, Any]:
    """A tool run by the workers' tool runners: doubles the running total."""
    await asyncio.sleep(float(args.get("secs", 0)))
    return {"total": args["total"] * 2}


@queue.handler("steps")
async def steps(task: Task, ctx: TaskContext) -> dict[str, Any]:
    """N steps, each after the tool call the previous one made; every step runs once."""
    state = ctx.checkpoint_data or {"done": 0, "total": 0}
    n = int(ctx.payload.get("steps", 5))
    tool = ctx.payload.get("tool", "double")
    while state["done"] < n:
        if state["done"] > 0:  # the next step needs the answer to the previous step's call
            args = {"step": state["done"], "total": state["total"],
                    "secs": ctx.payload.get("tool_secs", 0)}  # fmt: skip
            answer = await ctx.call_tool(tool, args)
            state = {**state, "total": answer["total"]}
        step = state["done"] + 1
        record(task, f"step{step}")
        if ctx.payload.get("compute_secs"):
            await asyncio.sleep(float(ctx.payload["compute_secs"]))
        state = {"done": step, "total": state["total"] + step}
        ctx.checkpoint(state)
    return state


@queue.handler("background")
async def background(task: Task, ctx: TaskContext) -> dict[str, Any]:
    """Long work in small steps, checkpointing after each (and yielding when asked)."""
    state = ctx.checkpoint_data or {"done": 0}
    record(task, f"run-from-{state['done']}")
    while state["done"] < int(ctx.payload["steps"]):
        await asyncio.sleep(float(ctx.payload.get("step_secs", 0.1)))
        state = {"done": state["done"] + 1}
        ctx.checkpoint(state)
    record(task, "finished")
    return state


@queue.handler("urgent")
async def urgent(task: Task, ctx: TaskContext) -> dict[str, Any]:
    record(task, "urgent")
    return {"idempotency_key": ctx.idempotency_key}


@queue.tool("search")
def search(args: dict[str, Any]) -> dict[str, Any]:
    """A plain-function tool (run in a thread): what the example command agent asks for."""
    return {"hits": [f"result for {args['q']}"]}
