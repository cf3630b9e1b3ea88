"""What every benchmark shares: run sizes, the run context, report rows, progress, statistics."""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..worker.tuning import ASYNC_CONCURRENCY

# Re-exported: the programs under benchmarks/ import the task types from here, where every tree
# has had them, since they run against older trees too (drain_ab.py's variants prepare with
# the variant's own agentqueue first on the path).
from .names import IO_STEP as IO_STEP
from .names import NOOP as NOOP

Backend = Literal["postgresql", "sqlite"]
BACKENDS: tuple[Backend, ...] = ("postgresql", "sqlite")
SYSTEMS = {"postgresql": "agentqueue (PostgreSQL)", "sqlite": "agentqueue (SQLite)"}
"""The name a report gives agentqueue on each backend."""


@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does."""

    drain_n: int = 20_000
    enqueue_one: int = 2_000
    enqueue_bulk: int = 20_000
    latency_rate: float = 50.0
    latency_secs: float = 10.0
    backlog: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    backlog_claims: int = 200
    """Timed claims per backlog size, split evenly between the rounds."""
    backlog_rounds: int = 10
    """Rounds in which the backlog sizes take turns at their claims."""
    metrics_tasks: int = 1_000_000
    metrics_scrapes: int = 200
    claim_size: int = 10
    scaling_n: int = 8_000
    scaling_workers: tuple[int, ...] = (1, 2, 4)
    scaling_concurrency: int = 16
    scaling_sleep_secs: float = 0.02
    drain_concurrency: int = ASYNC_CONCURRENCY
    """A drain worker's slots: what an `agentqueue worker` with async handlers derives."""
    idle_secs: float = 20.0
    busy_n: int = 20_000
    settle_secs: float = 1.0
    """How long a started worker is left alone before it counts as idle."""
    api_one: int = 10_000
    """Single submits through the API (and through AsyncQueue.submit)."""
    api_bulk: int = 20_000
    api_batch: int = 1_000
    api_clients: int = 16
    api_warm: int = 200
    """Untimed requests (or submits) before each timed one."""
    api_get_rate: float = 200.0
    api_get_secs: float = 15.0
    api_get_tasks: int = 10_000
    api_get_pool: int = 8
    """Connections the open-loop reader opens first (more when none is idle)."""
    api_waits: int = 40
    """Trials of a client waiting with ?wait= on a task that then completes."""
    api_rounds: int = 4
    """Turns each side of a submit comparison takes (N split between them)."""
    api_workers: tuple[int, ...] = (1, 2)
    """Processes of each API server (the first also serves the bulk and read measurements)."""
    dashboard_n: int = 1_000_000
    """Tasks in the table while the dashboard's pages are timed."""
    dashboard_completed: int = 20_000
    """Of them, completed through the API (what the overview's windows show)."""
    dashboard_renders: int = 30
    drain_rounds: int = 3
    """Rounds of the drains the ratios are taken of, each round's in turn (medians reported):
    the drain benchmark's (agentqueue as started and each peer at its best), the routed
    benchmark's three, the admission benchmark's two, and the floor program and its drain."""

    @classmethod
    def for_run(cls, n: int | None, smoke: bool, rounds: int | None = None) -> Sizes:
        """The full sizes, or the smoke sizes (tiny: the run only proves the code works);
        ``rounds``, when given, the drains' rounds (drain_rounds) either way."""
        if rounds is not None:
            return replace(cls.for_run(n, smoke), drain_rounds=rounds)
        if smoke:
            n = n or 500
            return cls(
                drain_n=n,
                enqueue_one=100,
                enqueue_bulk=n,
                latency_secs=1.5,
                backlog=(1_000, 10_000),
                backlog_claims=20,
                backlog_rounds=2,
                metrics_tasks=10_000,
                metrics_scrapes=20,
                scaling_n=min(n, 240),
                # Claims of 100 (half the slots): the floor takes one batch for its parameters
                # and still has several to time out of the smoke's few hundred tasks.
                drain_concurrency=200,
                idle_secs=2.0,
                busy_n=n,
                settle_secs=0.3,
                api_one=200,
                api_bulk=n,
                api_batch=100,
                api_warm=16,
                api_rounds=2,
                api_get_secs=1.5,
                api_get_tasks=200,
                api_waits=3,
                dashboard_n=2_000,
                dashboard_completed=200,
                dashboard_renders=3,
                drain_rounds=1,
            )
        n = n or cls.drain_n
        return cls(drain_n=n, enqueue_bulk=n, scaling_n=min(n, cls.scaling_n), busy_n=n, api_bulk=n)


@dataclass(frozen=True)
class Row:
    """One line of the report: a figure, and the target it is held to (if any)."""

    benchmark: str
    system: str
    figure: str
    value: float | None = None
    target: str = ""
    met: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "benchmark": self.benchmark,
            "system": self.system,
            "figure": self.figure,
            "value": self.value,
            "target": self.target or None,
            "met": self.met,
        }


def fmt_value(value: float | None, unit: str) -> str:
    """A figure with its unit: ``4.12x``, ``3.21 ms``, ``0.4%``, ``41.2 MiB``, ``7,512/s``."""
    if value is None or math.isnan(value):
        return "not measured"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "%":
        return f"{value:.2f}%"
    return f"{value:.2f}{unit}"


def target_row(
    benchmark: str, system: str, name: str, value: float | None, op: str, limit: float, unit: str
) -> Row:
    """A row held to ``value op limit`` (``>=``, ``<=`` or ``<``); ``met`` is None when the
    value was not measured."""
    shown = f"{op} {limit:g}{unit}"
    figure = f"{name}: {fmt_value(value, unit)}"
    if value is None or math.isnan(value):
        return Row(benchmark, system, figure, None, shown, None)
    met = {">=": value >= limit, "<=": value <= limit, "<": value < limit}[op]
    return Row(benchmark, system, figure, value, shown, met)


class Progress:
    """One progress bar over the whole run (on stderr), with an optional inner bar."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._tqdm: Any = tqdm
            self._bar = tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True)

    def step(self, label: str) -> None:
        """Say what runs now."""
        if self._bar is not None:
            self._bar.set_description(label)

    def done(self, n: int = 1) -> None:
        """Count finished steps."""
        if self._bar is not None:
            self._bar.update(n)

    def inner(self, total: int, label: str) -> Any:
        """A second bar for a long step (``update(n)``, ``close()``); a no-op when disabled."""
        if self._bar is None:
            return _NoBar()
        return self._tqdm(
            total=total, desc=label, leave=False, position=1, file=sys.stderr, dynamic_ncols=True
        )

    def write(self, message: str) -> None:
        """Print a line without breaking the bar."""
        if self._bar is not None:
            self._tqdm.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)

    def close(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.close()


class _NoBar:
    def update(self, n: int = 1) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""


@dataclass
class BenchContext:
    """Everything a benchmark needs to know about this run."""

    pg_url: str
    out_dir: Path
    work_dir: Path
    sizes: Sizes
    smoke: bool = False
    peers: bool = False
    peers_python: Path | None = None
    peers_dir: Path | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"
    progress: Progress = field(default_factory=lambda: Progress(0, enabled=False))
    peers_skipped: str = "not asked for"
    """Why the peers are not run (when they are not)."""
    sweep: bool = True
    """Each peer over its grid of settings (else at its one quick setting)."""
    _files: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def sqlite_url(self, label: str) -> str:
        """A new, empty SQLite database file for one run."""
        return f"sqlite:///{self.work_dir / f'{label}-{next(self._files)}.db'}"


def per_backend(result: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(backend, its name in the report, its figures) for each backend ``result`` measured
    under ``systems``: what every per-backend benchmark's rows are made from."""
    for backend, data in result.get("systems", {}).items():
        yield backend, SYSTEMS.get(backend, backend), data


def rotated(items: Sequence[Any], by: int) -> list[Any]:
    """``items`` turned left by ``by`` (the order of round ``by`` when the ways run in turn,
    each round starting with the next); empty stays empty."""
    if not items:
        return []
    k = by % len(items)
    return [*items[k:], *items[:k]]


def median_pass(results: Sequence[Mapping[str, Any]], key: str = "drain_per_s") -> dict[str, Any]:
    """Rounds of one drain as one pass: the round of the median rate (``key``) stands for it
    (its other figures with it), ``key`` the median of the rounds' rates, and every round's
    rate in ``rounds_per_s``, in the order they ran."""
    ranked = sorted(results, key=lambda r: float(r[key] or 0.0))
    return {
        **ranked[(len(ranked) - 1) // 2],
        key: statistics.median(float(r[key]) for r in results),
        "rounds_per_s": [r[key] for r in results],
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rate(count: int, seconds: float) -> float:
    """Items per second (NaN when no time passed)."""
    return count / seconds if seconds > 0 else math.nan


def fmt_rate(value: float | None) -> str:
    """``7,512/s``."""
    return "n/a" if value is None or math.isnan(value) else f"{value:,.0f}/s"


def fmt_ms(value: float | None) -> str:
    """``3.21 ms``."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f} ms"


def fmt_ratio(value: float | None) -> str:
    """``4.12x``."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing."""
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def mib(n_bytes: float | None) -> float | None:
    """Bytes in MiB."""
    return None if n_bytes is None else n_bytes / (1024 * 1024)
