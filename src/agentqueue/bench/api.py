"""The HTTP API against the Python API, on PostgreSQL: single submits, bulk submits, reads.

The API servers are real ``agentqueue api`` processes (uvicorn; one with 1 process and one
with ``--workers 2`` by default) with the per-token rate limit off
(``AGENTQUEUE_API__REQUESTS_PER_MINUTE=0``); the load comes from another process (the ``http``
role of ``agentqueue.bench.child``, a minimal keep-alive HTTP/1.1 client on uvloop), which
reports the CPU it used, the server's processes used and the machine was busy in its timed
window. The Python API runs in a process of its own too (the ``enqueue`` role).

On a shared machine the CPU left over changes from second to second, so the submit
comparisons run in rounds: N is split into ``api_rounds`` parts and each side takes a turn per
round, the order rotating, each turn from emptied tables (and a new submitter token, since the
tokens go with them) after an untimed warm-up; each side's times are added up. The server's CPU
time per request is reported too: it depends far less on the neighbours than a rate does.

1. single submits: ``POST /v1/tasks`` from ``clients`` keep-alive connections, each sending its
   next as soon as its answer is in, N in all; against ``AsyncQueue.submit`` in a loop, N;
2. bulk: ``POST /v1/tasks/bulk`` with ``batch`` tasks per request, one request at a time, N in
   all; against ``AsyncQueue.submit_many`` with ``batch`` per call, N;
3. reads: ``GET /v1/tasks/{id}`` of random tasks among a preloaded set (analyzed after
   loading) at a steady rate for a while, open-loop (sent on schedule whatever the answers
   do, each timed from its scheduled send time); p50 and p99.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.watch import POLL_SECS
from ..queue import AsyncQueue
from ..service import tokens
from ..store.admin import truncate_tables
from .common import (
    BenchContext,
    Row,
    fmt_ms,
    fmt_rate,
    fmt_value,
    percentile,
    rate,
    ratio,
    rotated,
    target_row,
)
from .db import analyze, fresh_url, specs
from .httpload import Connection, request_bytes
from .names import NOOP
from .procs import Child

NAME = "api"
HOST = "127.0.0.1"
SYSTEM = "agentqueue HTTP API (PostgreSQL)"
PYTHON = "agentqueue Python API (PostgreSQL)"
UNLIMITED = {"AGENTQUEUE_API__REQUESTS_PER_MINUTE": "0"}
"""The server's environment: no per-token rate limit (a benchmark measures the server)."""


def steps(ctx: BenchContext) -> int:
    """Progress steps of this benchmark."""
    return 5


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def start_server(ctx: BenchContext, url: str, workers: int) -> tuple[Child, int]:
    """``agentqueue api`` on a free port; returns once ``/readyz`` answers 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "agentqueue.cli", "--db", url, "api", "--host", HOST]
    cmd += ["--port", str(port)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    child = await Child.start_command(cmd, ctx.work_dir, "api-server", {**os.environ, **UNLIMITED})
    deadline = time.perf_counter() + 60
    probe = request_bytes("GET", "/readyz", f"{HOST}:{port}", "none")
    while True:
        if child.proc.returncode is not None:
            raise child._failed(f"exited with code {child.proc.returncode} before it was ready")
        status = None
        with contextlib.suppress(OSError):
            conn = await Connection.open(HOST, port)
            try:
                status, _ = await conn.send(probe)
            finally:
                conn.close()
        if status == 200:
            return child, port
        if time.perf_counter() > deadline:
            await child.kill()
            raise child._failed("not ready within 60s")
        await asyncio.sleep(0.1)


async def stop_server(child: Child) -> None:
    """SIGTERM; the server must shut down cleanly (uvicorn ends by raising the signal again
    once it has, so the process ends by SIGTERM rather than with code 0)."""
    child.terminate()
    try:
        code = await asyncio.wait_for(child.proc.wait(), 30)
    except TimeoutError:
        await child.kill()
        raise child._failed("did not exit within 30s") from None
    if code not in (0, -signal.SIGTERM):
        raise child._failed(f"exited with code {code}")


async def emptied(url: str) -> str:
    """Empty the tables and make a submitter token (the tokens went with the tables); return
    its secret."""
    await truncate_tables(url)
    queue = AsyncQueue(url, actor="bench")
    try:
        made = await tokens.create_token(
            await queue.runtime(), name="bench", role="submitter", actor="bench"
        )
    finally:
        await queue.close()
    return made.secret


async def load(
    ctx: BenchContext, server: Child, port: int, token: str, mode: str, **args: Any
) -> dict[str, Any]:
    """One load from a client process; its result (ValueError if any answer was not the one
    expected)."""
    spec = {"host": HOST, "port": port, "token": token, "mode": mode, "server_pid": server.pid}
    client = await Child.start("http", {**spec, **args}, ctx.work_dir, f"api-{mode}")
    try:
        result = await client.message("result", within=900)
        await client.wait(30)
    finally:
        await client.kill()
    if result.get("unexpected"):
        raise ValueError(f"{mode}: the API answered {result['unexpected']}")
    return result


async def python_api(
    ctx: BenchContext, url: str, one: int, bulk: int, batch: int, warm: int
) -> dict[str, Any]:
    """The Python API in a process of its own (``one`` submits in a loop, or ``bulk`` by
    submit_many ``batch`` at a time)."""
    await truncate_tables(url)
    args = {"url": url, "one": one, "bulk": bulk, "batch": batch, "warm": warm}
    child = await Child.start("enqueue", args, ctx.work_dir, "api-python")
    try:
        result = await child.message("result", within=900)
        await child.wait(30)
    finally:
        await child.kill()
    return result


async def preload_ids(url: str, n: int, batch: int) -> list[str]:
    """``n`` no-op tasks submitted with submit_many; their ids."""
    queue = AsyncQueue(url, actor="bench")
    ids: list[str] = []
    try:
        for start in range(0, n, batch):
            done = await queue.submit_many(specs(min(batch, n - start), NOOP))
            ids += [str(r.task.id) for r in done]
    finally:
        await queue.close()
    return ids


def _split(n: int, rounds: int) -> list[int]:
    """``n`` in ``rounds`` parts as equal as can be (the last ones larger)."""
    rounds = max(1, min(rounds, n))
    return [n // rounds + (1 if i >= rounds - n % rounds else 0) for i in range(rounds)]


@dataclass
class Sum:
    """One side's parts added up over the rounds of a measurement."""

    n: int = 0
    secs: float = 0.0
    cpu_secs: float = 0.0
    client_cpu_secs: float = 0.0
    window_secs: float = 0.0
    busy_secs: float = 0.0
    """Machine busy share times window length, so the rounds' shares average by time."""
    statuses: Counter[str] = field(default_factory=Counter)
    turns: list[dict[str, float]] = field(default_factory=list)
    """Each turn's rate and the machine's busy share then (how much the neighbours moved)."""

    def add_load(self, result: Mapping[str, Any], n: int) -> None:
        """Add one round of an HTTP load."""
        self.turns.append(
            {
                "per_s": rate(n, float(result["secs"])),
                "server_cpu_percent": float(result["server_cpu_percent"]),
                "machine_busy_percent": float(result["machine_busy_percent"] or 0),
            }
        )
        self.n += n
        self.secs += float(result["secs"])
        self.cpu_secs += float(result["server_cpu_secs"])
        self.client_cpu_secs += float(result["client_cpu_secs"])
        self.window_secs += float(result["window_secs"])
        self.busy_secs += float(result["machine_busy_percent"] or 0) * float(result["window_secs"])
        self.statuses.update({str(k): int(v) for k, v in result["statuses"].items()})

    def add_python(self, secs: float, cpu_secs: float, n: int) -> None:
        """Add one round of the Python API."""
        self.turns.append({"per_s": rate(n, secs)})
        self.n += n
        self.secs += secs
        self.cpu_secs += cpu_secs
        self.window_secs += secs

    def figures(self, requests: int | None = None) -> dict[str, Any]:
        """Rate and CPU; ``requests`` (default: ``n``) divides the server's CPU time."""
        window = self.window_secs
        out: dict[str, Any] = {
            "n": self.n,
            "secs": self.secs,
            "per_s": rate(self.n, self.secs),
            "cpu_percent": 100 * self.cpu_secs / window if window > 0 else None,
            "turns": self.turns,
        }
        if self.statuses:
            out["statuses"] = dict(sorted(self.statuses.items()))
            out["server_cpu_ms_per_request"] = 1000 * self.cpu_secs / (requests or self.n)
            out["client_cpu_percent"] = 100 * self.client_cpu_secs / window if window else None
            out["machine_busy_percent"] = self.busy_secs / window if window else None
        return out


async def run(ctx: BenchContext) -> dict[str, Any]:
    """The three measurements; single submits against every server size of ``api_workers``,
    the rest against the first."""
    s = ctx.sizes
    ctx.progress.step("api: servers")
    url = await fresh_url(ctx, "postgresql", "api")
    servers: dict[int, tuple[Child, int]] = {}
    try:
        for workers in s.api_workers:
            servers[workers] = await start_server(ctx, url, workers)
        ctx.progress.done()
        ctx.progress.step("api: single submits")
        single = await _singles(ctx, url, servers)
        ctx.progress.done()
        ctx.progress.step("api: bulk submits")
        main, port = servers[s.api_workers[0]]
        bulk = await _bulk(ctx, url, main, port)
        ctx.progress.done()
        ctx.progress.step("api: reads")
        get = await _reads(ctx, url, main, port)
        ctx.progress.done()
        ctx.progress.step("api: waiting clients")
        wait = await _waits(ctx, url, port)
        ctx.progress.done()
        ctx.progress.step("api: stop")
        for child, _ in servers.values():
            await stop_server(child)
        ctx.progress.done()
    finally:
        for child, _ in servers.values():
            await child.kill()
    out: dict[str, Any] = {
        "settings": {
            "server": "agentqueue api (uvicorn), [api] requests_per_minute = 0",
            "workers": list(s.api_workers),
            "clients": s.api_clients,
            "batch": s.api_batch,
            "rounds": s.api_rounds,
            "warm": s.api_warm,
        },
        "single": single,
        "bulk": bulk,
        "get": get,
        "wait": wait,
    }
    rounds = f"{s.api_rounds} rounds, each side's turn rotating, every turn from emptied tables"
    out["notes"] = [
        "API: `agentqueue api` with [api] requests_per_minute = 0, load from a separate client "
        "process (raw keep-alive HTTP/1.1 on uvloop); the Python API in a process of its own. "
        f"Single: {s.api_clients} connections sending POST /v1/tasks, N={s.api_one:,} (and "
        f"{s.api_warm} untimed first), against AsyncQueue.submit in a loop, same N; {rounds}. "
        f"Bulk: POST /v1/tasks/bulk, {s.api_batch:,} per request, one at a time, "
        f"N={s.api_bulk:,}, against submit_many with {s.api_batch:,} per call, same N; "
        f"{rounds}. Reads: GET /v1/tasks/{{id}} of {s.api_get_tasks:,} preloaded tasks "
        f"(analyzed) at {s.api_get_rate:g}/s for {s.api_get_secs:g} s, open-loop, timed from "
        f"each scheduled send. Waits: {s.api_waits} trials of GET /v1/tasks/{{id}}?wait=30 "
        "on an executing task that the benchmark then completes through AsyncQueue, timed "
        "from just before the completion is written to the whole answer. CPU as % of one "
        "core (the server: all its processes); machine "
        "busy as % of all cores, whoever used them."
    ]
    return out


async def _singles(
    ctx: BenchContext, url: str, servers: Mapping[int, tuple[Child, int]]
) -> dict[str, Any]:
    s = ctx.sizes
    python = Sum()
    api = {workers: Sum() for workers in servers}
    sides: list[int | None] = [None, *servers]  # None: the Python API
    for turn, n in enumerate(_split(s.api_one, s.api_rounds)):
        for side in rotated(sides, turn):
            if side is None:
                done = await python_api(ctx, url, n, 0, 1, s.api_warm)
                python.add_python(float(done["one_secs"]), float(done["one_cpu_secs"]), n)
                continue
            child, port = servers[side]
            token = await emptied(url)
            result = await load(
                ctx, child, port, token, "submit", clients=s.api_clients, n=n, warm=s.api_warm
            )
            api[side].add_load(result, n)
    first = api[s.api_workers[0]].figures()
    py = python.figures()
    return {
        "n": s.api_one,
        "clients": s.api_clients,
        "rounds": s.api_rounds,
        "python": py,
        "api": {str(workers): total.figures() for workers, total in api.items()},
        "api_per_s": first["per_s"],
        "python_per_s": py["per_s"],
        "ratio": ratio(first["per_s"], py["per_s"]),
        "statuses": first["statuses"],
        "server_cpu_ms_per_request": first["server_cpu_ms_per_request"],
        "server_cpu_percent": first["cpu_percent"],
        "client_cpu_percent": first["client_cpu_percent"],
        "machine_busy_percent": first["machine_busy_percent"],
    }


async def _bulk(ctx: BenchContext, url: str, server: Child, port: int) -> dict[str, Any]:
    s = ctx.sizes
    python, api = Sum(), Sum()
    requests = 0
    for turn, n in enumerate(_split(s.api_bulk, s.api_rounds)):
        for side in rotated(["python", "api"], turn):
            if side == "python":
                done = await python_api(ctx, url, 0, n, s.api_batch, s.api_warm)
                python.add_python(float(done["bulk_secs"]), float(done["bulk_cpu_secs"]), n)
                continue
            token = await emptied(url)
            result = await load(
                ctx, server, port, token, "bulk", batch=s.api_batch, n=n, warm=s.api_warm
            )
            api.add_load(result, n)
            requests += int(result["requests"])
    py, figures = python.figures(), api.figures(requests)
    return {
        "n": s.api_bulk,
        "batch": s.api_batch,
        "rounds": s.api_rounds,
        "requests": requests,
        "python": py,
        "api": figures,
        "api_per_s": figures["per_s"],
        "python_per_s": py["per_s"],
        "ratio": ratio(figures["per_s"], py["per_s"]),
        "statuses": figures["statuses"],
        "server_cpu_ms_per_request": figures["server_cpu_ms_per_request"],
        "server_cpu_percent": figures["cpu_percent"],
        "client_cpu_percent": figures["client_cpu_percent"],
        "machine_busy_percent": figures["machine_busy_percent"],
    }


async def _reads(ctx: BenchContext, url: str, server: Child, port: int) -> dict[str, Any]:
    s = ctx.sizes
    token = await emptied(url)
    ids = await preload_ids(url, s.api_get_tasks, s.api_batch)
    await analyze(url)
    ids_file = ctx.work_dir / "api-ids.json"
    ids_file.write_text(json.dumps(ids))
    gets = await load(
        ctx, server, port, token, "get", rate=s.api_get_rate, secs=s.api_get_secs,
        ids_file=str(ids_file), warm=s.api_warm, pool=s.api_get_pool,
    )  # fmt: skip
    latencies = [float(v) for v in gets.pop("latencies_ms")]
    return {
        "rate_per_s": s.api_get_rate,
        "secs": s.api_get_secs,
        "tasks": s.api_get_tasks,
        "n": gets["n"],
        "measured": len(latencies),
        "achieved_rate_per_s": rate(int(gets["n"]), float(gets["secs"])),
        "connections": gets["connections"],
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies) if latencies else None,
        "send_late_ms_p99": gets["send_late_ms_p99"],
        "statuses": gets["statuses"],
        "server_cpu_ms_per_request": 1000 * float(gets["server_cpu_secs"]) / int(gets["n"]),
        "server_cpu_percent": gets["server_cpu_percent"],
        "client_cpu_percent": gets["client_cpu_percent"],
        "machine_busy_percent": gets["machine_busy_percent"],
    }


WAIT_SETTLE_SECS = 0.2
"""How long a waiting request is given to reach the server before its task completes, plus a
random part of one poll interval, so that completions fall anywhere between the server's
polls (a fixed pause that is a multiple of the interval would always land just after one)."""


async def _waits(ctx: BenchContext, url: str, port: int) -> dict[str, Any]:
    """Completion to answer for a client waiting with ``?wait=``: the watcher's poll, the
    read, the answer, and the write of the completion itself."""
    import httpx

    token = await emptied(url)
    queue = AsyncQueue(url, actor="bench")
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(
            base_url=f"http://{HOST}:{port}", headers=headers, timeout=60
        ) as http:
            for _ in range(ctx.sizes.api_waits):
                made = await queue.submit(title="wait", task_type="bench-wait")
                await queue.admit()
                [task] = await queue.claim(1, "bench-worker", task_types=["bench-wait"])
                assert task.lock_token is not None
                waiting = asyncio.create_task(
                    http.get(f"/v1/tasks/{made.task.id}", params={"wait": 30})
                )
                await asyncio.sleep(WAIT_SETTLE_SECS + random.uniform(0, POLL_SECS))
                if waiting.done():
                    raise RuntimeError("a ?wait= request ended before its task did")
                before = time.perf_counter()
                await queue.complete(task.id, task.lock_token, {"ok": True})
                answer = await waiting
                latencies.append(1000 * (time.perf_counter() - before))
                if answer.status_code != 200 or answer.json()["state"] != "completed":
                    raise RuntimeError(f"a ?wait= request answered {answer.status_code}")
    finally:
        await queue.close()
    return {
        "trials": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
    }


def _cpu_text(data: Mapping[str, Any]) -> str:
    return (
        f"server CPU {fmt_value(data['server_cpu_ms_per_request'], ' ms')}/request "
        f"({fmt_value(data['server_cpu_percent'], '%')} of a core), client "
        f"{fmt_value(data['client_cpu_percent'], '%')}, machine "
        f"{fmt_value(data['machine_busy_percent'], '%')} busy"
    )


def rows(result: dict[str, Any]) -> list[Row]:
    """Single submits (target 1,500/s with one API process), bulk against submit_many (target
    80%), GET p99 (target under 10 ms), with the server's and the client's CPU beside them."""
    one, bulk, get, wait = result["single"], result["bulk"], result["get"], result["wait"]
    workers = [int(w) for w in one["api"]]
    out = [
        target_row(
            NAME, SYSTEM,
            f"single submits, {one['clients']} clients, {_processes(workers[0])} "
            f"(N={one['n']:,}; {_cpu_text(one)})",
            one["api_per_s"], ">=", 1500, "/s",
        )
    ]  # fmt: skip
    for extra in workers[1:]:
        data = one["api"][str(extra)]
        out.append(
            Row(
                NAME,
                SYSTEM,
                f"single submits, {one['clients']} clients, {_processes(extra)}: "
                f"{fmt_rate(data['per_s'])} (N={one['n']:,}; server CPU "
                f"{fmt_value(data['server_cpu_ms_per_request'], ' ms')}/request)",
                data["per_s"],
            )
        )
    out += [
        Row(
            NAME,
            PYTHON,
            f"AsyncQueue.submit one at a time: {fmt_rate(one['python_per_s'])} "
            f"(N={one['n']:,}); API ({_processes(workers[0])}) / Python: "
            f"{fmt_value(one['ratio'], 'x')}",
            one["python_per_s"],
        ),
        target_row(
            NAME, SYSTEM,
            f"bulk, {bulk['batch']:,}/request: {fmt_rate(bulk['api_per_s'])} against "
            f"submit_many's {fmt_rate(bulk['python_per_s'])} (N={bulk['n']:,}; "
            f"{_cpu_text(bulk)}); API/Python",
            bulk["ratio"], ">=", 0.8, "x",
        ),
        target_row(
            NAME, SYSTEM,
            f"GET /v1/tasks/{{id}} at {get['rate_per_s']:g}/s for {get['secs']:g} s, "
            f"open-loop (p50 {fmt_ms(get['p50_ms'])}; {_cpu_text(get)}); p99",
            get["p99_ms"], "<", 10, " ms",
        ),
        target_row(
            NAME, SYSTEM,
            f"?wait= on a task that completes, {wait['trials']} trials: completion to answer "
            f"(p50 {fmt_ms(wait['p50_ms'])}, max {fmt_ms(wait['max_ms'])}); p99",
            wait["p99_ms"], "<=", 100, " ms",
        ),
    ]  # fmt: skip
    return out


def _processes(workers: int) -> str:
    return "1 API process" if workers == 1 else f"{workers} API processes"
