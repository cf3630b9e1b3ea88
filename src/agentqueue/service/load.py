"""Admitted work as the caps count it: read by admission (scheduler) and by the agents listing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..store.base import LoadRow


@dataclass(frozen=True)
class Load:
    """Admitted work (queued or executing) as the caps count it."""

    total: int
    by_agent: Mapping[str, int]
    by_tenant: Mapping[str, int]

    @classmethod
    def count(cls, rows: Sequence[LoadRow]) -> Load:
        """Sum the store's grouped counts by agent and by tenant."""
        by_agent: Counter[str] = Counter()
        by_tenant: Counter[str] = Counter()
        for row in rows:
            if row.agent is not None:
                by_agent[row.agent] += row.count
            by_tenant[row.tenant] += row.count
        return cls(sum(by_tenant.values()), by_agent, by_tenant)
