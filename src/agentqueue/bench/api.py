"""The HTTP API against the Python API, on PostgreSQL: single submits, bulk submits, reads.

The API server is a real ``agentqueue api`` process (uvicorn) with the per-token rate limit off
(``AGENTQUEUE_API__REQUESTS_PER_MINUTE=0``); the load comes from another process (the ``http``
role of ``agentqueue.bench.child``, a minimal keep-alive HTTP/1.1 client on uvloop), which
reports the CPU it used, the server's processes used and the machine was busy in its timed
window. The Python API runs in a process of its own too (the ``enqueue`` role). Each
measurement starts from emptied tables (and a new submitter token, since the tokens go with
them) after an untimed warm-up:

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
import signal
import socket
import sys
import time
from typing import Any

from ..queue import AsyncQueue
from ..service import tokens
from ..store.admin import truncate_tables
from .common import (
    NOOP,
    BenchContext,
    Row,
    fmt_ms,
    fmt_rate,
    fmt_value,
    percentile,
    rate,
    ratio,
    target_row,
)
from .db import analyze, fresh_url, specs
from .httpload import Connection, request_bytes
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


def _cpu(figures: dict[str, Any]) -> dict[str, Any]:
    keys = ("client_cpu_percent", "server_cpu_percent", "machine_busy_percent", "window_secs")
    return {k: figures.get(k) for k in keys}


async def run(ctx: BenchContext) -> dict[str, Any]:
    """The three measurements against one server process."""
    s = ctx.sizes
    ctx.progress.step("api: server")
    url = await fresh_url(ctx, "postgresql", "api")
    server, port = await start_server(ctx, url, s.api_workers)
    ctx.progress.done()
    try:
        ctx.progress.step("api: single submits")
        py_one = await python_api(ctx, url, s.api_one, 0, 1, s.api_warm)
        token = await emptied(url)
        api_one = await load(
            ctx, server, port, token, "submit", clients=s.api_clients, n=s.api_one,
            warm=s.api_warm,
        )  # fmt: skip
        ctx.progress.done()
        ctx.progress.step("api: bulk submits")
        py_bulk = await python_api(ctx, url, 0, s.api_bulk, s.api_batch, s.api_warm)
        token = await emptied(url)
        api_bulk = await load(
            ctx, server, port, token, "bulk", batch=s.api_batch, n=s.api_bulk, warm=s.api_warm
        )
        ctx.progress.done()
        ctx.progress.step("api: reads")
        token = await emptied(url)
        ids = await preload_ids(url, s.api_get_tasks, s.api_batch)
        await analyze(url)
        ids_file = ctx.work_dir / "api-ids.json"
        ids_file.write_text(json.dumps(ids))
        gets = await load(
            ctx, server, port, token, "get", rate=s.api_get_rate, secs=s.api_get_secs,
            ids_file=str(ids_file), warm=s.api_warm, pool=s.api_get_pool,
        )  # fmt: skip
        ctx.progress.done()
        ctx.progress.step("api: stop")
        await stop_server(server)
        ctx.progress.done()
    finally:
        await server.kill()
    latencies = [float(v) for v in gets.pop("latencies_ms")]
    one_api = rate(int(api_one["n"]), float(api_one["secs"]))
    one_py = rate(int(py_one["one"]), float(py_one["one_secs"]))
    bulk_api = rate(int(api_bulk["n"]), float(api_bulk["secs"]))
    bulk_py = rate(int(py_bulk["bulk"]), float(py_bulk["bulk_secs"]))
    out: dict[str, Any] = {
        "settings": {
            "server": f"agentqueue api, {s.api_workers} process(es), uvicorn, "
            "[api] requests_per_minute = 0",
            "workers": s.api_workers,
            "clients": s.api_clients,
            "batch": s.api_batch,
            "warm": s.api_warm,
        },
        "single": {
            "n": s.api_one,
            "clients": s.api_clients,
            "api_per_s": one_api,
            "python_per_s": one_py,
            "ratio": ratio(one_api, one_py),
            "api_secs": api_one["secs"],
            "python_secs": py_one["one_secs"],
            "python_cpu_percent": 100 * py_one["one_cpu_secs"] / py_one["one_secs"],
            "statuses": api_one["statuses"],
            **_cpu(api_one),
        },
        "bulk": {
            "n": s.api_bulk,
            "batch": s.api_batch,
            "requests": api_bulk["requests"],
            "api_per_s": bulk_api,
            "python_per_s": bulk_py,
            "ratio": ratio(bulk_api, bulk_py),
            "api_secs": api_bulk["secs"],
            "python_secs": py_bulk["bulk_secs"],
            "python_cpu_percent": 100 * py_bulk["bulk_cpu_secs"] / py_bulk["bulk_secs"],
            "statuses": api_bulk["statuses"],
            **_cpu(api_bulk),
        },
        "get": {
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
            **_cpu(gets),
        },
    }
    out["notes"] = [
        f"API: one `agentqueue api` process ({s.api_workers} uvicorn worker(s)) with "
        "[api] requests_per_minute = 0; load from a separate client process (raw keep-alive "
        "HTTP/1.1 on uvloop). Single: "
        f"{s.api_clients} connections, POST /v1/tasks, N={s.api_one:,} after {s.api_warm} "
        f"untimed; against AsyncQueue.submit in a loop in one process, same N. Bulk: POST "
        f"/v1/tasks/bulk, {s.api_batch:,} per request, one at a time, N={s.api_bulk:,}; against "
        f"submit_many with {s.api_batch:,} per call, same N. Reads: GET /v1/tasks/{{id}} of "
        f"{s.api_get_tasks:,} preloaded tasks (analyzed) at {s.api_get_rate:g}/s for "
        f"{s.api_get_secs:g} s, open-loop, timed from each scheduled send. Every measurement "
        "starts from emptied tables. CPU as % of one core; machine busy as % of all cores."
    ]
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """Single submits (target 1,500/s), bulk against submit_many (target 80%), GET p99
    (target under 10 ms), with the client's and the server's CPU beside them."""
    one, bulk, get = result["single"], result["bulk"], result["get"]
    return [
        target_row(
            NAME, SYSTEM, f"single submits, {one['clients']} clients (N={one['n']:,})",
            one["api_per_s"], ">=", 1500, "/s",
        ),
        Row(
            NAME,
            PYTHON,
            f"AsyncQueue.submit one at a time: {fmt_rate(one['python_per_s'])} (N={one['n']:,});"
            f" API/Python {fmt_value(one['ratio'], 'x')}; during the API run: server CPU "
            f"{fmt_value(one['server_cpu_percent'], '%')}, client CPU "
            f"{fmt_value(one['client_cpu_percent'], '%')} of a core, machine "
            f"{fmt_value(one['machine_busy_percent'], '%')} busy",
            one["python_per_s"],
        ),
        target_row(
            NAME, SYSTEM,
            f"bulk {bulk['batch']:,}/request: {fmt_rate(bulk['api_per_s'])} against "
            f"submit_many {fmt_rate(bulk['python_per_s'])} (N={bulk['n']:,}); API/Python",
            bulk["ratio"], ">=", 0.8, "x",
        ),
        target_row(
            NAME, SYSTEM,
            f"GET /v1/tasks/{{id}} at {get['rate_per_s']:g}/s open-loop, p50 "
            f"{fmt_ms(get['p50_ms'])}; p99",
            get["p99_ms"], "<", 10, " ms",
        ),
    ]  # fmt: skip
