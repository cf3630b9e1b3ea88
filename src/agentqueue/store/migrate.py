"""Versioned schema migrations, one runner for both backends.

Each dialect keeps ``migrations/NNNN_name.sql``; the version table ``aq_schema_version`` records
what has been applied. A backend provides the two primitives of :class:`MigrationTarget`; the
runner decides what to apply and in which order.

The rule: from version ``ALIGNED_FROM`` (8) on, a migration has the same number in both dialects,
so a schema change is one number everywhere (a dialect with nothing to change ships a no-op under
that number). Before 8 the dialects went their own ways (PostgreSQL's 0003_event_hash has no SQLite
counterpart, so their 3 to 7 name different steps); SQLite's 0008_align is the no-op that brought
them level. Versions already recorded in ``aq_schema_version`` keep their meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Protocol

from ..domain.errors import StoreMisconfigured
from .sqlfile import shipped_folder

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
DIALECTS = ("sqlite", "postgres")
ALIGNED_FROM = 8
"""From this version on, both dialects ship the same set of migration numbers."""


@dataclass(frozen=True)
class Migration:
    """One schema step; its SQL is read from its file when first asked for (every command
    checks the versions when it opens a database, few of them apply a step)."""

    version: int
    name: str
    source: Traversable = field(repr=False)

    @property
    def sql(self) -> str:
        """The step's SQL."""
        return self.source.read_text()


def available(dialect: str) -> list[Migration]:
    """Every migration shipped for ``dialect``, in version order."""
    check_aligned()
    return _shipped(dialect)


@cache
def _shipped(dialect: str) -> list[Migration]:
    folder = shipped_folder(dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {versions}")
    return found


def aligned_mismatch(versions: dict[str, set[int]]) -> str | None:
    """What breaks the rule among the versions each dialect ships, or None if nothing does."""
    later = {name: {v for v in found if v >= ALIGNED_FROM} for name, found in versions.items()}
    if len({frozenset(v) for v in later.values()}) <= 1:
        return None
    shown = "; ".join(f"{name}: {sorted(v)}" for name, v in sorted(later.items()))
    return (
        f"migrations from {ALIGNED_FROM} on must have the same numbers in every dialect ({shown})"
    )


@cache
def check_aligned() -> None:
    """Fail if the dialects ship different migration numbers from ``ALIGNED_FROM`` on."""
    problem = aligned_mismatch({d: {m.version for m in _shipped(d)} for d in DIALECTS})
    if problem:
        raise RuntimeError(problem)


class MigrationTarget(Protocol):
    """What a backend does for the runner; each call is its own transaction."""

    async def applied_versions(self) -> set[int]:
        """Versions already applied (empty on a new database)."""
        ...

    async def apply_migration(self, migration: Migration) -> bool:
        """Apply one migration and record it, under a lock; False if another process did."""
        ...


async def run_migrations(target: MigrationTarget, dialect: str) -> list[int]:
    """Apply what is missing, in order; return the versions this call applied."""
    applied = await target.applied_versions()
    done: list[int] = []
    for migration in available(dialect):
        if migration.version in applied:
            continue
        if await target.apply_migration(migration):
            done.append(migration.version)
    return done


def latest_version(dialect: str) -> int:
    """The highest version this release knows."""
    return max((m.version for m in available(dialect)), default=0)


def refuse_newer(version: int, dialect: str) -> None:
    """Raise StoreMisconfigured when the schema is newer than this release: old code writing
    over a schema it does not know is how data gets corrupted."""
    latest = latest_version(dialect)
    if version > latest:
        raise StoreMisconfigured(
            f"the database schema is at version {version}, newer than this release of "
            f"agentqueue knows (version {latest}): upgrade agentqueue before using this database"
        )
