"""One leader (R21) on each backend: on the manual clock, the lease passes only when it expires
or is handed back; with real `agentqueue scheduler` processes, killing the leader hands the
leadership over in under 10 s."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from scheduler_helpers import spawn

from agentqueue import AsyncQueue, ManualClock
from agentqueue.config import Settings


async def test_one_leader_at_a_time_until_its_lease_lapses(db_url: str, clock: ManualClock) -> None:
    settings = Settings(scheduler={"leader_ttl_secs": 5, "renew_secs": 1})
    async with (
        AsyncQueue(db_url, clock=clock, settings=settings) as one,
        AsyncQueue(db_url, clock=clock, settings=settings) as two,
    ):
        a = one.scheduler(holder="a", listen=False).leadership
        b = two.scheduler(holder="b", listen=False).leadership
        assert await a.hold() and not await b.hold()
        for _ in range(10):  # a renews every second; b keeps trying and keeps failing
            clock.advance(seconds=1)
            assert await a.hold() and not await b.hold()
            assert a.leading() and not b.leading()
        # a stops renewing (its process hangs): it stops acting before its lease runs out...
        clock.advance(seconds=4)
        assert not a.leading()
        assert not await b.hold()  # ...and the lease still holds a moment longer
        clock.advance(seconds=1)
        assert await b.hold() and b.term == 2  # expired: b takes over with a new term
        info = await one.leader()
        assert info is not None and (info.holder, info.term) == ("b", 2)
        assert not await a.hold()  # a comes back as a follower
        await b.resign()  # a clean stop hands the lease back at once
        assert await a.hold() and a.term == 3


async def test_killing_the_leader_hands_over_within_10_seconds(db_url: str, tmp_path: Path) -> None:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        async with AsyncQueue(db_url) as queue:
            await queue.open()
            for name in ("s1", "s2"):
                args = ["--db", db_url, "scheduler", "--id", name]
                procs[name] = spawn(args, tmp_path / f"{name}.log")
            leader = await _wait_for_leader(queue, set(procs), within=20)
            follower = next(n for n in procs if n != leader.holder)
            procs[leader.holder].send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            taken = await _wait_for_leader(queue, {follower}, within=15)
            took = time.monotonic() - killed_at
            assert taken.term > leader.term
            assert took < 10, f"takeover took {took:.1f}s"
            # A clean stop (SIGTERM) hands the lease back: nobody holds it afterwards.
            procs[follower].send_signal(signal.SIGTERM)
            assert procs[follower].wait(timeout=10) == 0
            ended = await queue.leader()
            assert ended is not None and ended.holder == follower
            assert ended.expires_at <= datetime.now(UTC)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


async def _wait_for_leader(queue: AsyncQueue, holders: set[str], within: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        info = await queue.leader()
        if info is not None and info.holder in holders and info.expires_at > datetime.now(UTC):
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"none of {sorted(holders)} became the leader within {within}s")
