"""The programs benchmark child processes run: ``python -m agentqueue.bench.child ROLE ARGS``.

Roles (ARGS is a JSON object):

- ``drain`` ``{url, n, concurrency, settings}``: one worker with a no-op async handler runs
  until the store shows ``n`` tasks completed; the time runs from worker start to that moment
  (the last completion recorded), measured in this process.
- ``serve`` ``{url, concurrency, task_type, sleep_secs, wait_go, settings, stamp}``: a worker
  that runs until SIGTERM; with ``wait_go`` it opens its connections, says ready, and starts on
  a ``go`` line; with ``stamp`` its no-op handler returns the wall-clock time it began.
- ``enqueue`` ``{url, one, bulk, batch, warm, task_type}``: submit ``warm`` tasks untimed,
  then ``one`` one at a time, then ``bulk`` with submit_many, ``batch`` per call (default: one
  call).
- ``http`` ``{host, port, token, mode, ...}``: one load against an API server (``httpload``),
  on uvloop's event loop.

``settings`` (optional) is laid over the role's settings, nested as in the configuration file
(``{"admission": {"max_active": 1000}}``); ``drain``'s result and ``serve``'s ready message say
whether the worker's admission is limited, so the parent can tell the settings took.

Each prints JSON lines: ``{"event": "ready"}`` (serve: connections open), ``{"event":
"started"}`` (serve: the worker runs) and ``{"event": "result", ...}`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..config import Settings, WorkerSettings
from ..domain.models import Task
from ..domain.states import TaskState
from ..executors.inprocess import TaskContext
from ..logsetup import configure
from ..queue import AsyncQueue
from .db import specs
from .names import NOOP
from .procs import own_and_children_peak_rss_bytes, tree_cpu_seconds


def emit(event: str, **fields: Any) -> None:
    """Print one JSON message for the parent."""
    print(json.dumps({"event": event, **fields}), flush=True)


def cpu_now() -> float:
    """CPU seconds this process and its SQLite writer process have used so far (utime +
    stime of every thread, from /proc, as the parent reads them for an idle worker)."""
    return tree_cpu_seconds(os.getpid())


DRAIN_SETTINGS = Settings(worker=WorkerSettings(claims_in_flight=4, flushes_in_flight=4))
"""A worker tuned to drain no-op tasks: more claims and outcome writes under way at once."""


def _overlay(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _overlay(out[key], value)
        else:
            out[key] = value
    return out


def with_overrides(base: Settings, overrides: Mapping[str, Any] | None) -> Settings:
    """``base`` with ``overrides`` (nested dicts, as in the configuration file) laid over it;
    sections it names keep the values ``base`` set unless overridden."""
    if not overrides:
        return base
    # Only what base set explicitly: the rest comes back as defaults (or from the environment).
    return Settings(**_overlay(base.model_dump(exclude_unset=True), overrides))


def make_queue(
    url: str,
    task_type: str,
    sleep_secs: float = 0.0,
    settings: Settings | None = None,
    stamp: bool = False,
) -> AsyncQueue:
    """A queue with one async handler for ``task_type``: no-op, or a sleep (I/O wait). With
    ``stamp`` the no-op returns when it began, ``{"began_at_us": <wall clock, microseconds>}``."""
    # SQLite's writer as the long-running commands place it (a process while busy).
    queue = AsyncQueue(url, actor="bench", settings=settings or Settings(), sqlite_writer="auto")

    async def noop(task: Task, ctx: TaskContext) -> dict[str, int] | None:
        return {"began_at_us": time.time_ns() // 1000} if stamp else None

    async def io_step(task: Task, ctx: TaskContext) -> None:
        await asyncio.sleep(sleep_secs)

    queue.handler(task_type)(io_step if sleep_secs > 0 else noop)
    return queue


BACKGROUND = (
    "agentqueue-schedule",
    "agentqueue-heartbeat",
    "agentqueue-listen",
    "agentqueue-flush",
)
"""Names of a worker's background tasks (see ``join``)."""


async def join(runner: asyncio.Task[None], grace: float, tries: int = 5) -> int:
    """Wait for a stopped worker's ``run()``; return how often its shutdown had to be kicked.

    On Python 3.11, ``asyncio.wait_for`` swallows a cancellation that arrives as the awaited
    event is set, so a background loop of the worker can survive its cancel and ``run()``
    waits for it forever. If ``run()`` has not returned after ``grace`` seconds, its background
    tasks are cancelled again. (Callers stop a worker only once its work is recorded.)
    """
    kicks = 0
    while True:
        done, _ = await asyncio.wait({runner}, timeout=grace)
        if done:
            runner.result()
            return kicks
        if kicks >= tries:
            raise RuntimeError(f"the worker did not stop after {kicks} kicks")
        kicks += 1
        for task in asyncio.all_tasks():
            if task.get_name() in BACKGROUND and not task.done():
                task.cancel()


async def drain(args: dict[str, Any]) -> None:
    """Run one worker until ``n`` tasks are completed and recorded; report the time (from
    worker start until the store shows every task completed) and the cost."""
    n = int(args["n"])
    settings = with_overrides(DRAIN_SETTINGS, args.get("settings"))
    # Log as `agentqueue worker` does (one line per transition, to stderr: the child's file).
    configure(settings.logging.format, settings.logging.level, db_url=args["url"])
    queue = make_queue(args["url"], args.get("task_type", NOOP), settings=settings)
    await queue.open()
    worker = queue.worker(concurrency=int(args["concurrency"]))
    cpu0 = cpu_now()
    started = time.perf_counter()
    runner = asyncio.create_task(worker.run())
    # worker.stats counts tasks as their outcomes are recorded, cheaply: look every 5 ms.
    while worker.stats["completed"] < n and not runner.done():  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    # Every completion is recorded; the store shows them.
    while not runner.done():
        if (await queue.stats()).by_state[TaskState.COMPLETED] >= n:
            break
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - started
    cpu = cpu_now() - cpu0
    worker.stop()
    kicks = await join(runner, grace=3.0)
    await queue.close()
    emit(
        "result",
        elapsed=elapsed,
        completed=worker.stats["completed"],
        stats=worker.stats,
        cpu_secs=cpu,
        peak_rss_bytes=own_and_children_peak_rss_bytes(),
        shutdown_kicks=kicks,
        admission_limited=settings.admission_limited,
    )


async def serve(args: dict[str, Any]) -> None:
    """Run a worker until SIGTERM (after a ``go`` line on stdin when ``wait_go``)."""
    settings = with_overrides(Settings(), args.get("settings"))
    queue = make_queue(
        args["url"],
        args.get("task_type", NOOP),
        float(args.get("sleep_secs", 0)),
        settings,
        stamp=bool(args.get("stamp")),
    )
    await queue.open()
    worker = queue.worker(concurrency=int(args["concurrency"]), grace_secs=10.0)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    emit("ready", pid=os.getpid(), admission_limited=settings.admission_limited)
    if args.get("wait_go"):
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":
            await queue.close()
            emit("result", stats=worker.stats, aborted=True)
            return
    runner = asyncio.create_task(worker.run())
    await worker.started.wait()
    emit("started", at=time.time())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([runner, stopper], return_when=asyncio.FIRST_COMPLETED)
    worker.stop()
    kicks = await join(runner, grace=5.0)
    stopper.cancel()
    await queue.close()
    emit(
        "result",
        stats=worker.stats,
        peak_rss_bytes=own_and_children_peak_rss_bytes(),
        shutdown_kicks=kicks,
    )


async def enqueue(args: dict[str, Any]) -> None:
    """Submit ``warm`` tasks untimed, then ``one`` one at a time, then ``bulk`` with
    submit_many (``batch`` per call; default all in one call); report both rates and the CPU
    this process used for each."""
    task_type = args.get("task_type", NOOP)
    one, bulk = int(args["one"]), int(args["bulk"])
    batch = int(args.get("batch") or bulk or 1)
    queue = AsyncQueue(args["url"], actor="bench")
    await queue.open()
    for _ in range(int(args.get("warm", 0))):
        await queue.submit(title="bench", task_type=task_type)
    cpu0, started = cpu_now(), time.perf_counter()
    for _ in range(one):
        await queue.submit(title="bench", task_type=task_type)
    one_secs, one_cpu = time.perf_counter() - started, cpu_now() - cpu0
    items = specs(bulk, task_type)
    cpu0, started = cpu_now(), time.perf_counter()
    for start in range(0, bulk, batch):
        await queue.submit_many(items[start : start + batch])
    bulk_secs, bulk_cpu = time.perf_counter() - started, cpu_now() - cpu0
    await queue.close()
    emit(
        "result",
        one=one,
        one_secs=one_secs,
        one_cpu_secs=one_cpu,
        bulk=bulk,
        batch=batch,
        bulk_secs=bulk_secs,
        bulk_cpu_secs=bulk_cpu,
    )


async def http(args: dict[str, Any]) -> None:
    """One load against an API server in another process (see ``httpload``)."""
    from .httpload import run as run_load

    emit("result", **(await run_load(args)))


ROLES = {"drain": drain, "serve": serve, "enqueue": enqueue, "http": http}


def main(argv: list[str]) -> int:
    """Run the role named by ``argv[0]`` with the JSON arguments in ``argv[1]``."""
    if len(argv) != 2 or argv[0] not in ROLES:
        print(
            f"usage: python -m agentqueue.bench.child {{{','.join(ROLES)}}} JSON", file=sys.stderr
        )
        return 2
    factory = None
    if argv[0] == "http":  # the load generator should cost as little CPU as it can
        from .httpload import new_loop

        factory = new_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(ROLES[argv[0]](json.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
