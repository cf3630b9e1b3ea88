"""The peer queues: their virtual environment (``.peers/`` at the repository root) and their
drain drivers (``benchmarks/peers/``), which run with that environment's interpreter.

Each driver does the work of our drain: preload N no-op jobs, then one worker process drains
them; it prints one JSON line with the enqueue and drain rates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store.admin import dbname, drop_database, ensure_database, with_dbname
from .common import BenchContext
from .procs import run_command

PEER_REQUIREMENTS: tuple[str, ...] = (
    "procrastinate==3.10.0",
    "pgqueuer==1.6.0",
    "celery[redis]==5.7.0",
    "psycopg[binary]",
    "asyncpg",
)
PINNED = {"procrastinate": "3.10.0", "pgqueuer": "1.6.0", "celery": "5.7.0"}
VENV_DIR = ".peers"
DRIVERS_DIR = Path("benchmarks") / "peers"


@dataclass(frozen=True)
class Setting:
    """One setting of a peer's own knobs: the driver's arguments and how the report names it."""

    args: tuple[str, ...]
    label: str
    knobs: dict[str, Any]


@dataclass(frozen=True)
class Peer:
    """A peer queue, how its driver is run, and the settings its sweep tries (its own
    documented knobs). ``quick`` is the one setting run without a sweep: the best of a
    swept run on a 2-core machine (README, Performance; benchmarks/HISTORY.md)."""

    name: str
    label: str
    version: str
    script: str
    store: str
    grid: tuple[Setting, ...]
    quick: int = 0

    @property
    def quick_setting(self) -> Setting:
        """The setting run without a sweep."""
        return self.grid[self.quick]


def celery_concurrency() -> int:
    """Celery's own default prefork concurrency: one process per core."""
    return os.cpu_count() or 1


def pgqueuer_setting(concurrency: int, batch: int) -> Setting:
    """pgqueuer's ``max_concurrent_tasks`` and ``batch_size`` (it needs C >= 2B)."""
    return Setting(
        (str(concurrency), str(batch)),
        f"C={concurrency}, B={batch}",
        {"concurrency": concurrency, "batch": batch},
    )


def procrastinate_setting(concurrency: int) -> Setting:
    """procrastinate's worker ``concurrency``."""
    return Setting((str(concurrency),), f"C={concurrency}", {"concurrency": concurrency})


def celery_setting(pool: str, concurrency: int, prefetch: int) -> Setting:
    """Celery's ``--pool``, ``--concurrency`` and ``--prefetch-multiplier`` (acks_late)."""
    return Setting(
        (str(concurrency), pool, str(prefetch)),
        f"{pool} {concurrency}, prefetch {prefetch}",
        {"pool": pool, "concurrency": concurrency, "prefetch_multiplier": prefetch},
    )


PEERS: tuple[Peer, ...] = (
    Peer(
        "pgqueuer", "pgqueuer (PostgreSQL)", PINNED["pgqueuer"], "pgqueuer_drain.py",
        "postgresql",
        tuple(pgqueuer_setting(c, b) for c, b in ((20, 10), (100, 50), (200, 100), (500, 100))),
        quick=3,
    ),
    Peer(
        "procrastinate", "procrastinate (PostgreSQL)", PINNED["procrastinate"],
        "procrastinate_drain.py", "postgresql",
        tuple(procrastinate_setting(c) for c in (10, 50, 100)),
        quick=2,
    ),
    Peer(
        "celery", "Celery (Redis)", PINNED["celery"], "celery_drain.py", "redis",
        (
            celery_setting("prefork", celery_concurrency(), 4),
            celery_setting("prefork", celery_concurrency(), 64),
            celery_setting("threads", 16, 64),
        ),
        quick=2,
    ),
)  # fmt: skip
"""The peers, each with the grid its sweep tries. Celery's pools: prefork (its default, one
process per core) and threads (built in; eventlet and gevent need packages of their own)."""


def find_root() -> Path | None:
    """The repository root: the nearest directory holding ``benchmarks/peers``, looking up from
    the current directory, then from this package (an editable install)."""
    starts = [Path.cwd().resolve(), Path(__file__).resolve().parent]
    for start in starts:
        for path in (start, *start.parents):
            if (path / DRIVERS_DIR).is_dir():
                return path
    return None


def venv_python(root: Path) -> Path:
    """The interpreter of the peers' virtual environment."""
    return root / VENV_DIR / "bin" / "python"


def setup_peers(root: Path) -> Path:
    """Create ``.peers/`` (if missing) and install the pinned peer versions; return its
    interpreter. Output goes to the terminal; CalledProcessError if a step fails."""
    python = venv_python(root)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root / VENV_DIR)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", *PEER_REQUIREMENTS],
        check=True,
    )
    return python


_VERSIONS = """
import importlib.metadata as m, json
out = {}
for name in ("procrastinate", "pgqueuer", "celery", "redis", "psycopg", "asyncpg"):
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def peer_versions(python: Path) -> dict[str, Any]:
    """The installed versions of the peers (None for a missing one)."""
    done = subprocess.run(
        [str(python), "-c", _VERSIONS], capture_output=True, text=True, check=True, timeout=60
    )
    versions: dict[str, Any] = json.loads(done.stdout)
    return versions


def check_peers(root: Path | None) -> tuple[Path | None, str]:
    """The peers' interpreter if it is ready, else None and why not."""
    if root is None:
        return None, f"no {DRIVERS_DIR} found (run from the repository)"
    python = venv_python(root)
    if not python.exists():
        return None, f"no {root / VENV_DIR}: run `agentqueue bench --setup-peers` first"
    try:
        versions = peer_versions(python)
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        return None, f"{python} does not work: {exc}"
    wrong = [f"{n} {versions.get(n)} (want {v})" for n, v in PINNED.items() if versions.get(n) != v]
    if wrong:
        return None, f"wrong peer versions in {root / VENV_DIR}: {', '.join(wrong)}; re-run setup"
    return python, ""


def peer_database(ctx: BenchContext, peer: Peer) -> str:
    """The peer's own database, named after the run's (``aq_bench`` -> ``aq_bench_pgqueuer``)."""
    return with_dbname(ctx.pg_url, f"{dbname(ctx.pg_url)}_{peer.name}")


async def run_peer(
    ctx: BenchContext,
    peer: Peer,
    setting: Setting,
    n: int,
    analyze: bool,
    deadline: float,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one peer's drain driver at one setting and return its JSON result (its clocks and
    how many tasks it finished); with ``analyze`` its tables get planner statistics after the
    preload; its worker is stopped after ``deadline`` seconds."""
    assert ctx.peers_python is not None and ctx.peers_dir is not None
    env = dict(os.environ)
    env["PEER_ANALYZE"] = "1" if analyze else "0"
    env["PEER_DEADLINE"] = str(deadline)
    env.update(env_extra or {})
    if peer.store == "postgresql":
        dsn = peer_database(ctx, peer)
        # A new database every run: statistics left from an analyzed run survive TRUNCATE and
        # would leak into the run without them.
        await drop_database(dsn)
        await ensure_database(dsn)
        env["PEER_DSN"] = dsn
    else:
        env["PEER_REDIS_URL"] = ctx.redis_url
        env["PEER_KEY_PREFIX"] = f"{dbname(ctx.pg_url)}:"
    cmd = [str(ctx.peers_python), str(ctx.peers_dir / peer.script), str(n), *setting.args]
    # The driver preloads, then waits for its worker at most ``deadline`` seconds.
    within = deadline + max(120.0, n / 100)
    result = await run_command(cmd, ctx.work_dir, peer.name, within=within, env=env)
    result["setting"] = setting.label
    result["knobs"] = setting.knobs
    return result
