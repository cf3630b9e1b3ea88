"""Runs the chosen benchmarks in one go and writes the report.

The order of the run puts the backlog benchmark (which loads up to a million tasks) last, so its
write load does not disturb the others; the report keeps the order of ``BENCHMARKS``.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..store.admin import ensure_database, scalar, server_version
from . import (
    BENCHMARKS,
    admission,
    agent,
    api,
    backlog,
    cost,
    dashboard,
    drain,
    enqueue,
    floor,
    latency,
    metrics,
    routed,
    scaling,
)
from .common import BenchContext, Progress, Row, Sizes
from .facts import machine
from .peers import check_peers, find_root, peer_versions
from .procs import cache_bytecode, shutdown_kicks
from .report import drain_chart, markdown, write_json

MODULES: dict[str, ModuleType] = {
    "drain": drain,
    "enqueue": enqueue,
    "latency": latency,
    "admission": admission,
    "backlog": backlog,
    "scaling": scaling,
    "cost": cost,
    "api": api,
    "metrics": metrics,
    "dashboard": dashboard,
    "routed": routed,
    "agent": agent,
    "floor": floor,
}
RUN_ORDER: tuple[str, ...] = (
    "drain", "enqueue", "latency", "admission", "scaling", "cost", "api", "backlog", "metrics",
    "dashboard",
)  # fmt: skip
RUN_ORDER += ("routed", "agent", "floor")


@dataclass
class Options:
    """What to run, and where."""

    benchmarks: tuple[str, ...] = BENCHMARKS
    n: int | None = None
    rounds: int | None = None
    pg_url: str = "postgresql://postgres@127.0.0.1:5432/aq_bench"
    out_dir: Path | None = None
    peers: bool | None = None
    sweep: bool | None = None
    smoke: bool = False
    redis_url: str = "redis://127.0.0.1:6379/0"
    progress: bool = True


@dataclass
class RunReport:
    """The outcome of a run: the JSON document, the table rows, the files written."""

    doc: dict[str, Any]
    rows: list[Row]
    markdown: str
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every benchmark ran without an error."""
        return not self.doc["errors"]


def redact(url: str) -> str:
    """A URL with its password hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def default_out_dir() -> Path:
    """``benchmarks/results`` of the repository (or of the current directory)."""
    root = find_root()
    return (root or Path.cwd()) / "benchmarks" / "results"


async def run(options: Options) -> RunReport:
    """Run the benchmarks and write results.json (and a timestamped copy), results.md and
    drain.png."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    cache_bytecode()
    sizes = Sizes.for_run(options.n, options.smoke, options.rounds)
    out_dir = options.out_dir or default_out_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    root = find_root()
    await ensure_database(options.pg_url)
    facts = machine(root, await server_version(options.pg_url))
    facts["postgresql_autovacuum"] = str(await scalar(options.pg_url, "SHOW autovacuum"))
    selected = [b for b in RUN_ORDER if b in options.benchmarks]
    notes: list[str] = []
    if facts["postgresql_autovacuum"] != "on" and "drain" in selected:
        notes.append(
            "autovacuum is off on this PostgreSQL server, so no table gets planner statistics by "
            "itself: the drain runs ANALYZE after every preload, for every system, as autovacuum "
            "would on a production server."
        )
    errors: list[str] = []
    want_peers = (not options.smoke) if options.peers is None else options.peers
    python: Path | None = None
    versions: dict[str, Any] | None = None
    skipped = "--no-peers" if options.peers is False else "smoke mode (add --peers)"
    if want_peers and "drain" in selected:
        python, skipped = check_peers(root)
        if python is None:
            (errors if options.peers else notes).append(f"peers not run: {skipped}")
        else:
            versions = peer_versions(python)
    # SQLite files go next to the results, not to /tmp (often a RAM disk, where fsync is free).
    with tempfile.TemporaryDirectory(prefix=".work-", dir=out_dir) as work:
        ctx = BenchContext(
            pg_url=options.pg_url,
            out_dir=out_dir,
            work_dir=Path(work),
            sizes=sizes,
            smoke=options.smoke,
            peers=python is not None,
            peers_python=python,
            peers_dir=None if root is None else root / "benchmarks" / "peers",
            redis_url=options.redis_url,
            peers_skipped=skipped,
            sweep=(not options.smoke) if options.sweep is None else options.sweep,
        )
        total = sum(MODULES[name].steps(ctx) for name in selected)
        ctx.progress = Progress(total, enabled=options.progress)
        results: dict[str, Any] = {}
        try:
            for name in selected:
                try:
                    results[name] = await MODULES[name].run(ctx)
                except Exception as exc:
                    detail = "".join(traceback.format_exception_only(exc)).strip()
                    errors.append(f"{name}: {detail}")
                    ctx.progress.write(f"{name} failed: {detail}")
                    results[name] = {"error": detail}
                errors += [f"{name}: {e}" for e in results[name].get("errors", [])]
        finally:
            ctx.progress.close()
    ordered = {name: results[name] for name in BENCHMARKS if name in results}
    rows = [
        row
        for name, result in ordered.items()
        if "error" not in result
        for row in MODULES[name].rows(result)
    ]
    kicks = shutdown_kicks()
    if kicks:
        notes.append(
            f"{len(kicks)} worker process(es) hung at shutdown (a background loop survived its "
            "cancellation: asyncio.wait_for on Python 3.11) and were cancelled again; figures "
            "are unaffected (work is recorded before a worker is stopped)."
        )
    finished = datetime.now(UTC)
    doc: dict[str, Any] = {
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": finished.isoformat(timespec="seconds"),
        "wall_secs": time.perf_counter() - t0,
        "options": {
            "benchmarks": [b for b in BENCHMARKS if b in options.benchmarks],
            "smoke": options.smoke,
            "peers": python is not None,
            "sweep": ctx.sweep,
            "pg": redact(options.pg_url),
            "redis": redact(options.redis_url) if python is not None else None,
            "sizes": asdict(sizes),
            "sqlite_dir": str(out_dir),
            "agentqueue_env": sorted(k for k in os.environ if k.startswith("AGENTQUEUE_")),
        },
        "machine": facts,
        "peer_versions": versions,
        "results": ordered,
        "rows": [row.to_json() for row in rows],
        "targets": [row.to_json() for row in rows if row.target],
        "notes": notes,
        "shutdown_kicks": kicks,
        "errors": errors,
    }
    text = markdown(doc, rows)
    report = RunReport(doc, rows, text)
    report.files["json"] = out_dir / "results.json"
    report.files["markdown"] = out_dir / "results.md"
    write_json(report.files["json"], doc)
    stamped = out_dir / f"results-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    write_json(stamped, doc)  # kept: results.json is the latest run only
    report.files["json (this run)"] = stamped
    report.files["markdown"].write_text(text)
    chart = out_dir / "drain.png"
    if "drain" in ordered and drain_chart(
        chart, ordered["drain"], drain.LABELS, facts["cores"] or 0
    ):
        report.files["chart"] = chart
    return report
