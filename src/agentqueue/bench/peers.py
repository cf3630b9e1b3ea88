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

from ..store.admin import drop_database, ensure_database, with_dbname
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
class Peer:
    """A peer queue and how its driver is run."""

    name: str
    label: str
    script: str
    store: str
    args: tuple[str, ...]
    settings: str


def celery_concurrency() -> int:
    """Celery's own default prefork concurrency: one process per core."""
    return os.cpu_count() or 1


PEERS: tuple[Peer, ...] = (
    Peer(
        "pgqueuer", "pgqueuer (PostgreSQL)", "pgqueuer_drain.py", "postgresql", ("20", "10"),
        "concurrency 20, batch 10",
    ),
    Peer(
        "procrastinate", "procrastinate (PostgreSQL)", "procrastinate_drain.py", "postgresql",
        ("10",), "concurrency 10",
    ),
    Peer(
        "celery", "Celery (Redis)", "celery_drain.py", "redis", (str(celery_concurrency()),),
        f"prefork, concurrency {celery_concurrency()} (one per core), acks_late",
    ),
)  # fmt: skip


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


async def run_peer(ctx: BenchContext, peer: Peer, n: int, analyze: bool = False) -> dict[str, Any]:
    """Run one peer's drain driver and return its JSON result; with ``analyze`` its tables get
    planner statistics after the preload."""
    assert ctx.peers_python is not None and ctx.peers_dir is not None
    env = dict(os.environ)
    env["PEER_ANALYZE"] = "1" if analyze else "0"
    if peer.store == "postgresql":
        dsn = with_dbname(ctx.pg_url, f"aq_bench_{peer.name}")
        # A new database every run: statistics left from an analyzed run survive TRUNCATE and
        # would leak into the run without them.
        await drop_database(dsn)
        await ensure_database(dsn)
        env["PEER_DSN"] = dsn
    else:
        env["PEER_REDIS_URL"] = ctx.redis_url
    cmd = [str(ctx.peers_python), str(ctx.peers_dir / peer.script), str(n), *peer.args]
    result = await run_command(cmd, ctx.work_dir, peer.name, within=max(180.0, n / 20), env=env)
    result["settings"] = peer.settings
    return result
