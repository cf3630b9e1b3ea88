"""Dispatch steps: where one dispatch's time goes, inside the worker, unrouted and routed.

The dispatch latency benchmark's path (``agentqueue bench latency`` and ``routed``): an idle
worker (the benchmark's ``serve`` child, concurrency 10, its no-op handler stamping when it
began), N tasks submitted one at a time, one every ``--every`` seconds, on a fresh PostgreSQL
database. Here the worker is the same child with some of its functions wrapped to note the wall
clock as they are entered and left: the notice of the task reaching the worker, the claimer's
claim, the scheduler's admission pass, its first round trip (lock, candidates, load, tenants),
its writes, the hand-over claim and the pass's end. Each task's steps are the first of each kind
between its created time and its handler's start; the medians, in ms from the created time, are
printed per way, the ways taken in turn ``--rounds`` times::

    .venv/bin/python benchmarks/dispatch_steps.py [--n 300] [--every 0.02] [--rounds 2]

Below them, the routed way's admission passes: those that admitted a task and those that found
nothing (the passes a completion's notice or a claim that came back short wakes), each with
its count and the medians of its first round trip (from the pass's start to its load and
tenants back), its writes (from the admissions sent to the pass's end, the COMMIT and the
hand-over's attempts started) and the whole pass.

``--variant LABEL=SRC`` (repeatable) runs the worker with the tree SRC (a directory holding the
``agentqueue`` package, such as a ``git archive`` of a commit, unpacked) first on its
PYTHONPATH, the variants in turn within each round (A, B, A, B, ...), so a change to the
dispatch path is measured against the load of the same minutes. The submits, and the schema,
are this checkout's::

    git archive REV src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/dispatch_steps.py --rounds 4 \\
        --variant A=/tmp/base/src --variant B=src

Routed: the routed benchmark's six agents configured (every task waits in pending and the
scheduler's planner admits it). The wrappers cost a few microseconds each: the figures are a map
of a dispatch, not a latency benchmark (``agentqueue bench latency routed`` gives those).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentqueue import AsyncQueue, TaskState
from agentqueue.bench.common import NOOP
from agentqueue.bench.db import reset_postgres, wait_for_count
from agentqueue.bench.procs import Child
from agentqueue.bench.routed import ROUTED
from agentqueue.config import Settings
from agentqueue.store.admin import drop_database, ensure_database

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import first_on_path, parse_variants

HERE = Path(__file__).resolve()
OUT_ENV = "AQ_DISPATCH_STEPS_OUT"
WAYS = ("unrouted", "routed")
NOTICE = {"unrouted": "aq_queued", "routed": "aq_pending"}
"""The notice that announces a submitted task to the worker, each way."""
STEPS = [
    ("notice", WAYS, "the submit's notice reaches the worker"),
    ("claim>", ("unrouted",), "the claimer's claim sent"),
    ("claim<", ("unrouted",), "the claim back (committed)"),
    ("pass>", ("routed",), "the admission pass starts"),
    (
        "load_and_tenants<",
        ("routed",),
        "its first round trip back (lock, candidates, load, tenants)",
    ),
    ("admit_ids>", ("routed",), "the plan made, the admission's writes being sent"),
    ("claim_next<", ("routed",), "the hand-over claim queued with them"),
    ("pass<", ("routed",), "the admission and its claim committed"),
    ("began", WAYS, "the handler began"),
]
"""Each step noted: its name, the ways it is on the path of, what it is."""


def _child(args_json: str) -> int:
    """The ``serve`` child with its steps noted, written to $AQ_DISPATCH_STEPS_OUT at exit."""
    from agentqueue.bench import child
    from agentqueue.scheduler import admission
    from agentqueue.store import tx
    from agentqueue.worker import claimer, notices

    noted: list[tuple[float, str, str]] = []

    def wrap(owner: Any, attr: str, name: str, told: Callable[[Any], str] = lambda _: "") -> None:
        """Note when ``owner.attr`` is entered and left; leaving, with ``told`` of its answer
        (of None if it raised)."""
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        async def wrapped(*a: Any, **k: Any) -> Any:
            noted.append((time.time(), name + ">", ""))
            answer = None
            try:
                answer = await fn(*a, **k)
                return answer
            finally:
                noted.append((time.time(), name + "<", told(answer)))

        setattr(owner, attr, wrapped)

    route = notices.NoticeRouter.route

    def heard(self: notices.NoticeRouter, notice: Any) -> None:
        noted.append((time.time(), "notice", notice.channel))
        route(self, notice)

    notices.NoticeRouter.route = heard  # type: ignore[method-assign]
    # A pass's end tells how many tasks it admitted (0 if it failed).
    wrap(admission, "_admit_once", "pass", lambda admitted: str(len(admitted or ())))
    wrap(claimer.Claimer, "_claim", "claim")
    for name in ("load_and_tenants", "admit_ids", "claim_next"):
        wrap(tx.SQLTx, name, name)

    def dump() -> None:
        Path(os.environ[OUT_ENV]).write_text(json.dumps(noted))

    atexit.register(dump)
    return child.main(["serve", args_json])


def _steps(
    tasks: list[Any], noted: list[tuple[float, str, str]], notice: str
) -> dict[str, list[float]]:
    """Per step, each task's first such note between its created time and its handler's start,
    in ms from the created time."""
    out: dict[str, list[float]] = {}
    for task in tasks:
        created = task.created_at.timestamp()
        began = task.result["began_at_us"] / 1e6
        seen: dict[str, float] = {"began": began}
        for at, name, info in noted:
            # The notice on the way's channel; the end of a pass that admitted something.
            ours = (name != "notice" or info == notice) and (name != "pass<" or info != "0")
            if created <= at <= began and name not in seen and ours:
                seen[name] = at
        for name, at in seen.items():
            out.setdefault(name, []).append((at - created) * 1000)
    return out


PASS_FIGURES = [
    ("n", "passes"),
    ("first", "first round trip (start -> load and tenants back)"),
    ("writes", "writes (admissions sent -> the pass's end)"),
    ("whole", "the whole pass"),
]
"""The figures of the admission passes' table: key, what it is."""


def _passes(noted: list[tuple[float, str, str]]) -> dict[str, dict[str, float]]:
    """The routed way's admission passes, by what they admitted ("admitting": some task,
    "empty": none): how many, and the medians of their round trips and length, in ms."""
    spans: dict[str, dict[str, list[float]]] = {"admitting": {}, "empty": {}}
    start: float | None = None
    marks: dict[str, float] = {}
    for at, name, info in noted:
        if name == "pass>":
            start, marks = at, {}
        elif start is not None and name == "pass<":
            kind = "admitting" if int(info) > 0 else "empty"
            figures = spans[kind]
            figures.setdefault("whole", []).append((at - start) * 1000)
            if "load_and_tenants<" in marks:
                back = marks["load_and_tenants<"]
                figures.setdefault("first", []).append((back - start) * 1000)
            if "admit_ids>" in marks:
                figures.setdefault("writes", []).append((at - marks["admit_ids>"]) * 1000)
            start = None
        elif start is not None:
            marks.setdefault(name, at)  # each step's first in the pass
    out: dict[str, dict[str, float]] = {}
    for kind, figures in spans.items():
        out[kind] = {"n": float(len(figures.get("whole", [])))}
        out[kind].update({k: statistics.median(v) for k, v in figures.items()})
    return out


async def one_way(
    way: str, n: int, every: float, pg: str, work_dir: Path, src: str | None = None
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The median of each step, ``way`` on a fresh database, and its admission passes; the
    worker runs the tree ``src`` (None: this checkout's)."""
    await drop_database(pg)
    await ensure_database(pg)
    await reset_postgres(pg)
    settings = ROUTED if way == "routed" else None
    args: dict[str, Any] = {"url": pg, "concurrency": 10, "task_type": NOOP, "stamp": True}
    if settings:
        args["settings"] = settings
    out = work_dir / f"steps-{way}.json"
    out.unlink(missing_ok=True)
    queue = AsyncQueue(pg, actor="bench", settings=Settings(**settings) if settings else Settings())
    await queue.open()
    child = await Child.start_command(
        [sys.executable, str(HERE), "--child", json.dumps(args)],
        work_dir,
        f"steps-{way}",
        env=_env(src, out),
    )
    try:
        await child.message("started", within=60)
        await asyncio.sleep(1.0)  # the worker is idle
        begin = time.perf_counter()
        for i in range(n):
            delay = begin + i * every - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.submit(title="bench", task_type=NOOP)
        await wait_for_count(queue, TaskState.COMPLETED, n, within=120)
        tasks = (await queue.list(state=TaskState.COMPLETED, limit=n)).items
        await child.stop()
    finally:
        await child.kill()
        await queue.close()
    noted = json.loads(out.read_text())
    steps = _steps(tasks, noted, NOTICE[way])
    return {name: statistics.median(values) for name, values in steps.items()}, _passes(noted)


def _env(src: str | None, out: Path) -> dict[str, str]:
    """The worker's environment: where it writes its notes, and the variant's tree first."""
    env = {**os.environ, OUT_ENV: str(out)}
    if src is not None:
        env["PYTHONPATH"] = first_on_path(src, env.get("PYTHONPATH"))
    return env


Run = tuple[str, str, int, dict[str, float], dict[str, dict[str, float]]]
"""A variant's label, the way, the round, the steps' medians, the admission passes."""


async def run(args: argparse.Namespace, variants: list[tuple[str, str | None]]) -> list[Run]:
    work_dir = Path(args.work_dir)
    runs: list[Run] = []
    for r in range(args.rounds):
        for label, src in variants:
            for way in WAYS:
                medians, passes = await one_way(way, args.n, args.every, args.pg, work_dir, src)
                runs.append((label, way, r + 1, medians, passes))
    await drop_database(args.pg)
    return runs


def _heading(label: str, way: str, r: int) -> str:
    return f"{label} {way} {r}" if label else f"{way} {r}"


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        sys.exit(_child(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--every", type=float, default=0.02, help="seconds between submits")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/aq_dispatch_steps")
    parser.add_argument("--work-dir", default="benchmarks/results/dispatch_steps")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=SRC",
        help="the worker's tree (repeatable; the variants in turn each round)",
    )
    args = parser.parse_args()
    given = parse_variants(parser, args.variant, at_least=0)
    variants: list[tuple[str, str | None]] = [(v.label, v.src) for v in given]
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(run(args, variants or [("", None)]))
    print(f"N={args.n}, one submit every {args.every:g} s; ms from each task's created time")
    print("| step | " + " | ".join(_heading(lb, way, r) for lb, way, r, _, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for name, ways, what in STEPS:
        cells = [f"{m[name]:.2f}" if way in ways and name in m else "" for _, way, _, m, _ in runs]
        print(f"| {what} | " + " | ".join(cells) + " |")
    routed = [(lb, r, p) for lb, way, r, _, p in runs if way == "routed"]
    print()
    print("Routed: the admission passes (those that admitted a task; those that found none), ms")
    headings = " | ".join(_heading(lb, "routed", r) for lb, r, _ in routed)
    print(f"| passes | figure | {headings} |")
    print("|---|---|" + "---|" * len(routed))
    for kind in ("admitting", "empty"):
        for key, what in PASS_FIGURES:
            cells = [
                (f"{p[kind][key]:.0f}" if key == "n" else f"{p[kind][key]:.2f}")
                if key in p[kind]
                else ""
                for _, _, p in routed
            ]
            if any(cells):
                print(f"| {kind} | {what} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
