"""The ``agentqueue bench`` command. Only click is imported here: the benchmark modules (and
their extra dependencies, ``pip install 'agentqueue[bench]'``) load when the command runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click

from . import BENCHMARKS

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/aq_bench"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def _missing_extras(progress: bool, chart: bool) -> list[str]:
    wanted = (["tqdm"] if progress else []) + (["matplotlib"] if chart else [])
    return [name for name in wanted if importlib.util.find_spec(name) is None]


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument(
    "benchmarks", nargs=-1, type=click.Choice(["all", *BENCHMARKS, "startup", "isolation"])
)
@click.option(
    "--n", "n", type=click.IntRange(min=10), help="Tasks per drain [default: 20,000; smoke: 500]."
)
@click.option(
    "--rounds",
    "rounds",
    type=click.IntRange(min=1, max=20),
    help="Rounds of the drains the ratios are taken of (drain: agentqueue as started and each "
    "peer at its best; routed; admission; floor: the floor program and its drain), taken in "
    "turn, medians reported [default: 3; smoke: 1].",
)
@click.option(
    "--pg",
    "pg_url",
    default=DEFAULT_PG,
    show_default=True,
    help="PostgreSQL database for the runs (created if missing; its agentqueue tables are "
    "emptied). Peers use <database>_<peer> databases on the same server, and the backlog "
    "benchmark <database>_backlog_<size> ones (dropped when it ends).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where results.json, results.md and drain.png go [default: benchmarks/results/].",
)
@click.option(
    "--peers/--no-peers",
    default=None,
    help="Run pgqueuer, procrastinate and Celery too [default: on, off with --smoke].",
)
@click.option(
    "--sweep/--no-sweep",
    default=None,
    help="Run each peer over its grid of settings and report its best; without, each peer runs "
    "at one setting (its best in an earlier run) [default: on, off with --smoke].",
)
@click.option(
    "--smoke", is_flag=True, help="Tiny sizes, to prove the benchmarks work (well under a minute)."
)
@click.option(
    "--setup-peers",
    is_flag=True,
    help="Create .peers/ at the repository root with the pinned peer versions, then exit.",
)
@click.option(
    "--redis",
    "redis_url",
    default=DEFAULT_REDIS,
    show_default=True,
    help="Redis for Celery (only keys under <database>: are written and deleted).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document after the table.")
def bench(
    benchmarks: tuple[str, ...],
    n: int | None,
    rounds: int | None,
    pg_url: str,
    out_dir: Path | None,
    peers: bool | None,
    sweep: bool | None,
    smoke: bool,
    setup_peers: bool,
    redis_url: str,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Measure agentqueue (and its peers) on this machine: drain, enqueue, latency, admission,
    backlog, scaling, cost, api, metrics, dashboard, routed, agent, floor. Prints a markdown
    table; writes JSON, markdown and a drain chart.

    BENCHMARKS are any of drain, enqueue, latency, admission, backlog, scaling, cost, api,
    metrics, dashboard, routed, agent, floor (default: all), and startup (not in all: the
    command's own start-up, ``--help`` and ``list`` on a small SQLite database, 20 runs each, 5
    with --smoke; printed only), and isolation (not in all: the start of a command agent's
    attempt unsandboxed and under bubblewrap, 20 attempts each, 5 with --smoke; printed only).
    Targets are checked and shown, never enforced: the exit code is 0 unless a benchmark failed.
    """
    if setup_peers:
        _setup_peers()
        return
    if "isolation" in benchmarks:
        from . import isolation

        click.echo(isolation.report(isolation.measure(runs=5 if smoke else 20)))
        benchmarks = tuple(b for b in benchmarks if b != "isolation")
        if not benchmarks:
            return
    if "startup" in benchmarks:
        from . import startup

        click.echo(startup.report(startup.measure(runs=5 if smoke else 20)))
        benchmarks = tuple(b for b in benchmarks if b != "startup")
        if not benchmarks:
            return
    chosen = BENCHMARKS if not benchmarks or "all" in benchmarks else tuple(benchmarks)
    missing = _missing_extras(not no_progress, "drain" in chosen)
    if missing:
        click.echo(
            f"error: {', '.join(missing)} missing: pip install 'agentqueue[bench]'", err=True
        )
        sys.exit(1)
    from .report import json_text
    from .runner import Options, run

    options = Options(
        benchmarks=chosen,
        n=n,
        rounds=rounds,
        pg_url=pg_url,
        out_dir=out_dir,
        peers=peers,
        sweep=sweep,
        smoke=smoke,
        redis_url=redis_url,
        progress=not no_progress,
    )
    import asyncio

    try:
        report = asyncio.run(run(options))
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # cannot start at all (no PostgreSQL, say): one clear line
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    click.echo(report.markdown)
    for kind, path in report.files.items():
        click.echo(f"{kind}: {path}")
    if as_json:
        click.echo(json_text(report.doc))
    if not report.ok:
        for error in report.doc["errors"]:
            click.echo(f"error: {error}", err=True)
        sys.exit(1)


def _setup_peers() -> None:
    import subprocess

    from .peers import VENV_DIR, check_peers, find_root, setup_peers

    root = find_root() or Path.cwd()
    click.echo(f"setting up {root / VENV_DIR}")
    try:
        setup_peers(root)
    except (subprocess.CalledProcessError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    python, why = check_peers(root)
    if python is None:
        click.echo(f"error: {why}", err=True)
        sys.exit(1)
    click.echo(f"peers ready: {python}")
