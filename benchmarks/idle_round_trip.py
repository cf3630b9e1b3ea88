"""Idle round trips: what a claim costs when it is the first statement after a pause, as every
dispatch at a low rate is, against the same claim sent right after another statement.

On a fresh PostgreSQL database, through the queue's own API (``AsyncQueue.submit`` and
``AsyncQueue.claim``, one task of one type each time), ``--n`` times each way, the ways taken in
turn ``--rounds`` times:

- ``back to back``: this process submits a task and claims it at once, then pauses ``--every``
  seconds: the claim follows a statement on a pooled connection that has just worked.
- ``on notice``: another process submits a task every ``--every`` seconds, and this one, woken by
  the task's notice (``aq_queued``), claims it: the latency benchmark's path, without the worker
  around it. Timed from the claim's call to its answer.
- ``on notice, later``: the same, the claim sent ``--later`` seconds after the notice, once the
  submitting process has long finished its own work.

And beside them, a bare ``SELECT 1`` on a connection of its own, right after another and after a
pause of ``--every`` seconds. Prints each way's median and 90th percentile in ms::

    .venv/bin/python benchmarks/idle_round_trip.py [--n 300] [--every 0.02] [--rounds 2]

A map of where a dispatch's time goes on this machine (the wake-ups a pause costs), not a
latency benchmark (``agentqueue bench latency`` and ``routed`` give those).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import psycopg

from agentqueue import AsyncQueue
from agentqueue.bench.common import percentile
from agentqueue.store.admin import drop_database, ensure_database

SUBMITTER = """
import asyncio, sys
from agentqueue import AsyncQueue

async def main(url, n, every):
    async with AsyncQueue(url) as queue:
        await asyncio.sleep(1.0)  # the listener is up by then
        for i in range(n):
            await queue.submit({"title": f"notice {i}", "task_type": "idle_rt"})
            await asyncio.sleep(every)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""
TYPE = "idle_rt"
WARM_UP = 20
"""Claims of each way left out of the figures (the pool's connections and plans warming)."""


async def back_to_back(queue: AsyncQueue, n: int, every: float) -> list[float]:
    times = []
    for i in range(n + WARM_UP):
        await queue.submit({"title": f"back {i}", "task_type": TYPE})
        start = time.perf_counter()
        got = await queue.claim(10, "idle-rt", [TYPE], [])
        times.append((time.perf_counter() - start) * 1000)
        assert len(got) == 1, got
        await asyncio.sleep(every)
    return times[WARM_UP:]


async def on_notice(queue: AsyncQueue, url: str, n: int, every: float, later: float) -> list[float]:
    times = []
    claimed = 0
    total = n + WARM_UP
    submitter = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SUBMITTER, url, str(total), str(every)
    )
    try:
        async with queue.store.listen(["aq_queued"]) as notices:
            async for _ in notices:
                if later:
                    await asyncio.sleep(later)
                start = time.perf_counter()
                got = await queue.claim(10, "idle-rt", [TYPE], [])
                times.append((time.perf_counter() - start) * 1000)
                claimed += len(got)
                if claimed >= total:
                    break
    finally:
        async with asyncio.timeout(120):
            await submitter.wait()
    return times[WARM_UP:]


async def bare(url: str, n: int, every: float) -> tuple[list[float], list[float]]:
    """SELECT 1 right after another, and after a pause of ``every`` seconds."""
    after_one: list[float] = []
    after_pause: list[float] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(n + WARM_UP):
            await conn.execute("SELECT 1", prepare=True)
            start = time.perf_counter()
            await conn.execute("SELECT 1", prepare=True)
            after_one.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(every)
            start = time.perf_counter()
            await conn.execute("SELECT 1", prepare=True)
            after_pause.append((time.perf_counter() - start) * 1000)
    return after_one[WARM_UP:], after_pause[WARM_UP:]


async def run(url: str, n: int, every: float, later: float, rounds: int) -> None:
    await drop_database(url)
    await ensure_database(url)
    ways: dict[str, list[float]] = {}
    try:
        async with AsyncQueue(url) as queue:
            for round_no in range(1, rounds + 1):
                got = {
                    "claim, back to back": await back_to_back(queue, n, every),
                    "claim on notice": await on_notice(queue, url, n, every, 0.0),
                    f"claim on notice, {later * 1000:g} ms later": await on_notice(
                        queue, url, n, every, later
                    ),
                }
                one, paused = await bare(url, n, every)
                got["SELECT 1 right after another"] = one
                got[f"SELECT 1 after {every * 1000:g} ms idle"] = paused
                for way, times in got.items():
                    ways.setdefault(way, []).extend(times)
                print(f"round {round_no}: " + ", ".join(
                    f"{way} {statistics.median(times):.3f}" for way, times in got.items()
                ) + " ms (medians)", flush=True)  # fmt: skip
    finally:
        await drop_database(url)
    print(f"\nN={n} a way a round, {rounds} round(s), one every {every:g} s; ms")
    print("| way | p50 | p90 |")
    print("|---|---|---|")
    for way, times in ways.items():
        print(f"| {way} | {statistics.median(times):.3f} | {percentile(times, 90):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--every", type=float, default=0.02, help="seconds between tasks")
    parser.add_argument("--later", type=float, default=0.005, help="seconds after the notice")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_idle_rt")
    args = parser.parse_args()
    asyncio.run(run(args.pg, args.n, args.every, args.later, args.rounds))


if __name__ == "__main__":
    main()
