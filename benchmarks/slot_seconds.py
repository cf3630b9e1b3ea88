"""Slot-seconds per task, with and without waiting_tool (R9).

A 10-step agent whose steps each compute for ``--compute`` seconds and then wait on a tool call
that takes ``--tool`` seconds. With waiting_tool the call goes to a tool runner and the task gives
its slot back while it waits; without, the handler awaits the same work inline and holds its slot.
Slot-seconds are read from the audit log: for every attempt, from its claim to the event that
ended it. One worker in this process, on a fresh SQLite file (or ``--db``)::

    .venv/bin/python benchmarks/slot_seconds.py [--steps 10] [--compute 0.05] [--tool 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue, Task, TaskContext


def build(url: str, compute: float, tool_secs: float) -> AsyncQueue:
    queue = AsyncQueue(url)

    @queue.tool("lookup")
    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(tool_secs)
        return {"step": args["step"]}

    @queue.handler("with_tools")
    async def with_tools(task: Task, ctx: TaskContext) -> dict[str, Any]:
        state = ctx.checkpoint_data or {"done": 0}
        while state["done"] < task.payload["steps"]:
            if state["done"] > 0:
                await ctx.call_tool("lookup", {"step": state["done"]})
            await asyncio.sleep(compute)  # this step's own work
            state = {"done": state["done"] + 1}
            ctx.checkpoint(state)
        return state

    @queue.handler("inline")
    async def inline(task: Task, ctx: TaskContext) -> dict[str, Any]:
        for step in range(task.payload["steps"]):
            if step > 0:
                await asyncio.sleep(tool_secs)  # the same tool work, awaited in the slot
            await asyncio.sleep(compute)
        return {"done": task.payload["steps"]}

    return queue


async def slot_seconds(queue: AsyncQueue, task_id: Any) -> tuple[float, int]:
    """Seconds between each claim and the event that ended that attempt; and the attempts."""
    events = await queue.events(task_id)
    held = 0.0
    attempts = 0
    for event, after in itertools.pairwise(events):
        if event.action == "claim":
            held += (after.at - event.at).total_seconds()
            attempts += 1
    return held, attempts


async def measure(url: str, steps: int, compute: float, tool_secs: float) -> dict[str, Any]:
    queue = build(url, compute, tool_secs)
    await queue.open()
    worker = queue.worker(concurrency=1)
    runner = asyncio.create_task(worker.run())
    out: dict[str, Any] = {}
    try:
        for kind in ("with_tools", "inline"):
            made = await queue.submit(title=kind, task_type=kind, payload={"steps": steps})
            started = time.perf_counter()
            while (await queue.get(made.task.id)).state.value != "completed":  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            held, attempts = await slot_seconds(queue, made.task.id)
            out[kind] = {"slot_secs": held, "attempts": attempts,
                         "wall_secs": time.perf_counter() - started}  # fmt: skip
    finally:
        worker.stop(0)
        await runner
        await queue.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compute", type=float, default=0.05)
    parser.add_argument("--tool", type=float, default=1.0)
    parser.add_argument("--db", help="database URL (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp()) / 'slots.db'}"
    result = asyncio.run(measure(url, args.steps, args.compute, args.tool))
    print(f"{args.steps} steps, {args.compute:g} s of compute each, tool calls of {args.tool:g} s")
    print("| variant | slot-seconds per task | attempts | wall seconds |")
    print("|---|---|---|---|")
    for kind, label in (("with_tools", "waiting_tool"), ("inline", "tool awaited in the slot")):
        r = result[kind]
        print(f"| {label} | {r['slot_secs']:.2f} | {r['attempts']} | {r['wall_secs']:.2f} |")


if __name__ == "__main__":
    main()
