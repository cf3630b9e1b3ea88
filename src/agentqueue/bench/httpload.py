"""The load generator of the API benchmark: a minimal HTTP/1.1 keep-alive client on asyncio.

Only what the benchmark sends and what the API answers is understood: requests are prepared
bytes (the ``Content-Length`` written in), answers carry a ``Content-Length`` (the API never
streams these). A general client (httpx) spends more CPU per request than the server does on a
plain read, and on a 2-core machine the client would then measure itself; this one parses a
status line and one header.

Two shapes of load:

- :func:`closed_loop`: ``clients`` connections, each sending its next request as soon as the
  previous answer is in, until ``n`` requests have been answered (a throughput figure);
- :func:`open_loop`: requests sent on a fixed schedule (``rate`` per second) whatever the
  answers do, each on an idle connection (a new one when none is idle), each timed from its
  scheduled send time, so a slow answer delays no later measurement (no coordinated omission).

``run`` is the ``http`` role of ``agentqueue.bench.child``: it runs one load against a server
in another process and reports the times, the answers by status, and the CPU this process,
the server's processes and the whole machine used during the timed window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .procs import CLK_TCK, cpu_seconds, tree_pids


class HTTPError(RuntimeError):
    """The server answered something this client does not understand, or hung up."""


def request_bytes(
    method: str, path: str, host: str, token: str, body: bytes | None = None
) -> bytes:
    """One prepared HTTP/1.1 request (keep-alive, bearer token, JSON body if any)."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        f"Authorization: Bearer {token}",
        "Accept: application/json",
    ]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


class Connection(asyncio.Protocol):
    """One keep-alive connection: ``await conn.send(request)`` gives (status, body)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.lost: Exception | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        """Connect to ``host:port``."""
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, host, port)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they are transports.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or HTTPError("the server closed the connection")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None or self.waiter.done():
            return
        head = bytes(self.buffer[:end]).lower()
        start = head.find(b"\r\ncontent-length:")
        if start < 0:
            self.waiter.set_exception(HTTPError(f"no Content-Length in {head[:200]!r}"))
            return
        stop = head.find(b"\r\n", start + 2)
        length = int(head[start + 17 : stop if stop >= 0 else len(head)])
        total = end + 4 + length
        if len(self.buffer) < total:
            return
        status = int(head[9:12])
        body = bytes(self.buffer[end + 4 : total])
        del self.buffer[:total]
        self.waiter.set_result((status, body))

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send one request and wait for its answer."""
        if self.lost is not None:
            raise self.lost
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        """Hang up."""
        if self.transport is not None:
            self.transport.close()


@dataclass
class Outcome:
    """What a load got back: answers by status, the first unexpected answer, latencies."""

    statuses: Counter[int] = field(default_factory=Counter)
    unexpected: str | None = None
    latencies_ms: list[float] = field(default_factory=list)

    def note(self, status: int, body: bytes, expected: int) -> None:
        """Count an answer; keep the first one that is not ``expected``."""
        self.statuses[status] += 1
        if status != expected and self.unexpected is None:
            self.unexpected = f"{status}: {body[:300].decode(errors='replace')}"


async def closed_loop(
    host: str,
    port: int,
    clients: int,
    n: int,
    make: Callable[[int], bytes],
    expected: int,
    outcome: Outcome,
) -> float:
    """Send requests ``make(0)`` .. ``make(n - 1)`` over ``clients`` connections, each waiting
    for its answer before the next; return the seconds from the first send to the last
    answer."""
    conns = [await Connection.open(host, port) for _ in range(clients)]
    counter = iter(range(n))

    async def client(conn: Connection) -> None:
        for i in counter:
            status, body = await conn.send(make(i))
            outcome.note(status, body, expected)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(c) for c in conns))
        return time.perf_counter() - started
    finally:
        for conn in conns:
            conn.close()


async def open_loop(
    host: str,
    port: int,
    rate: float,
    secs: float,
    make: Callable[[int], bytes],
    expected: int,
    outcome: Outcome,
    pool: int,
) -> dict[str, Any]:
    """Send ``rate`` requests per second for ``secs`` seconds on a fixed schedule; each answer's
    latency runs from its scheduled send time. ``pool`` connections are opened first; more are
    opened when none is idle at a send time."""
    idle = [await Connection.open(host, port) for _ in range(pool)]
    opened = len(idle)
    n = max(1, round(rate * secs))
    loop = asyncio.get_running_loop()
    late_ms: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        nonlocal opened
        late_ms.append((time.perf_counter() - due) * 1000)
        if idle:
            conn = idle.pop()
        else:
            conn = await Connection.open(host, port)
            opened += 1
        status, body = await conn.send(make(i))
        outcome.latencies_ms.append((time.perf_counter() - due) * 1000)
        outcome.note(status, body, expected)
        idle.append(conn)

    begin = time.perf_counter() + 0.01
    for i in range(n):
        due = begin + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    finished = time.perf_counter()
    for conn in idle:
        conn.close()
    return {
        "n": n,
        "secs": finished - begin,
        "connections": opened,
        "send_late_ms_p99": _percentile(late_ms, 99),
        "send_late_ms_max": max(late_ms) if late_ms else None,
    }


def _percentile(values: Sequence[float], q: float) -> float | None:
    from .common import percentile

    return percentile(list(values), q) if values else None


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class CpuWindow:
    """CPU used by this process, by a server's process tree and by the machine over a window."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.started = 0.0

    def _server(self) -> float:
        if self.server_pid is None:
            return 0.0
        total = 0.0
        for pid in tree_pids(self.server_pid):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += cpu_seconds(pid)
        return total

    def start(self) -> None:
        """Begin the window."""
        self.started = time.perf_counter()
        self.own0 = cpu_seconds(os.getpid())
        self.server0 = self._server()
        self.busy0, self.total0 = machine_busy_ticks()

    def stop(self) -> dict[str, Any]:
        """End the window: CPU as % of one core (this process, the server) and the machine's
        busy share (% of all its cores)."""
        wall = time.perf_counter() - self.started
        own = cpu_seconds(os.getpid()) - self.own0
        server = self._server() - self.server0
        busy, total = machine_busy_ticks()
        busy, total = busy - self.busy0, total - self.total0
        return {
            "window_secs": wall,
            "client_cpu_secs": own,
            "client_cpu_percent": 100 * own / wall if wall > 0 else None,
            "server_cpu_secs": server,
            "server_cpu_percent": 100 * server / wall if wall > 0 else None,
            "machine_busy_percent": 100 * busy / total if total > 0 else None,
            "clk_tck": CLK_TCK,
        }


def _submit_body(i: int) -> bytes:
    return json.dumps({"title": f"bench {i}", "task_type": "bench_noop"}).encode()


def _bulk_body(batch: int) -> bytes:
    tasks = [{"title": "bench", "task_type": "bench_noop"} for _ in range(batch)]
    return json.dumps({"tasks": tasks}).encode()


def _read_ids(path: str) -> list[str]:
    ids = json.loads(Path(path).read_text())
    assert isinstance(ids, list) and ids, "no task ids to read"
    return [str(i) for i in ids]


async def run(args: dict[str, Any]) -> dict[str, Any]:
    """One load against the API (``mode``: ``submit``, ``bulk`` or ``get``), after a warm-up;
    the figures of its timed window."""
    host, port, token = args["host"], int(args["port"]), args["token"]
    where = f"{host}:{port}"
    mode = args["mode"]
    outcome, warm = Outcome(), Outcome()
    window = CpuWindow(args.get("server_pid"))
    out: dict[str, Any] = {"mode": mode}
    if mode == "submit":
        clients, n = int(args["clients"]), int(args["n"])

        def make(i: int) -> bytes:
            return request_bytes("POST", "/v1/tasks", where, token, _submit_body(i))

        await closed_loop(host, port, clients, int(args.get("warm", 0)), make, 201, warm)
        window.start()
        secs = await closed_loop(host, port, clients, n, make, 201, outcome)
        out.update(n=n, clients=clients, secs=secs)
    elif mode == "bulk":
        batch, n = int(args["batch"]), int(args["n"])
        requests = -(-n // batch)
        full = request_bytes("POST", "/v1/tasks/bulk", where, token, _bulk_body(batch))
        last = request_bytes(
            "POST", "/v1/tasks/bulk", where, token, _bulk_body(n - batch * (requests - 1))
        )

        def make(i: int) -> bytes:
            return last if i == requests - 1 else full

        warm_one = request_bytes("POST", "/v1/tasks/bulk", where, token, _bulk_body(1))
        await closed_loop(host, port, 1, int(args.get("warm", 0)), lambda i: warm_one, 200, warm)
        window.start()
        secs = await closed_loop(host, port, 1, requests, make, 200, outcome)
        out.update(n=n, batch=batch, requests=requests, secs=secs)
    elif mode == "get":
        ids = _read_ids(args["ids_file"])  # before the timed window
        chooser = random.Random(7)
        paths = [
            request_bytes("GET", f"/v1/tasks/{chooser.choice(ids)}", where, token)
            for _ in range(max(1, round(float(args["rate"]) * float(args["secs"]))))
        ]
        pool = int(args.get("pool", 8))
        await closed_loop(
            host, port, pool, int(args.get("warm", 0)), lambda i: paths[i % len(paths)], 200, warm
        )
        window.start()
        schedule = await open_loop(
            host,
            port,
            float(args["rate"]),
            float(args["secs"]),
            lambda i: paths[i],
            200,
            outcome,
            pool,
        )
        out.update(schedule, rate=float(args["rate"]))
        out["latencies_ms"] = outcome.latencies_ms
    else:
        raise ValueError(f"unknown mode {mode!r}")
    out.update(window.stop())
    out["statuses"] = {str(k): v for k, v in sorted(outcome.statuses.items())}
    out["unexpected"] = outcome.unexpected or warm.unexpected
    out["warm"] = sum(warm.statuses.values())
    return out


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when it is installed (it is, with uvicorn[standard]), else
    asyncio's: the client should cost as little CPU as it can."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
