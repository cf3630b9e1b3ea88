"""Readiness: the database answers and its schema is the one this release uses."""

from __future__ import annotations

from ..domain.errors import StoreError
from .runtime import Runtime


async def readiness(rt: Runtime) -> str | None:
    """None when ready; else what is wrong, in words (never a secret)."""
    try:
        version = await rt.store.schema_version()
    except StoreError as exc:
        return f"the database is unavailable: {exc}"
    latest = rt.store.latest_schema_version()
    if version != latest:
        return f"the schema is at version {version}; this release uses {latest} (run migrate)"
    return None
