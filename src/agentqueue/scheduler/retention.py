"""Dead-letter retention (R8): dead letters kept past their retention are purged. And the
metrics rollup's rows of connections that are gone are folded into one row per key.

``[retention] dead_letter_p0_days`` (30) for P0, ``dead_letter_days`` (7) for the rest, counted
from when the task entered dead_letter. A purge deletes the task row and its captured output and
ends the task's audit chain with a purge event, in one transaction; the events stay, so
``verify`` still proves the whole history (domain.retention says what is due and writes that
event).
"""

from __future__ import annotations

from ..domain.audit import purge_record
from ..domain.retention import purge_due, purge_event
from ..service.records import ADMITTER
from ..service.runtime import Runtime
from ..store.base import Purge

ACTOR = ADMITTER


async def purge_expired_dead_letters(rt: Runtime, limit: int = 500) -> int:
    """Purge up to ``limit`` dead letters past their retention, oldest first; return how many.

    Several schedulers may run this at once: each skips the dead letters another has locked.
    """
    now = rt.clock.now()
    policy = rt.settings.retention.policy()
    p0_before, other_before = policy.cutoffs(now)
    async with rt.store.transaction() as tx:
        expired = await tx.lock_expired_dead_letters(limit, p0_before, other_before)
        items = [
            Purge(task.id, task.event_seq, purge_event(task, now, policy, ACTOR))
            for task in expired
            if purge_due(task, now, policy)
        ]
        purged = await tx.purge(items)
        if purged:
            # Signed with the audit key in the same transaction (R24): a purge event written
            # by someone without the key is not named in any such record.
            await tx.record_audit(purge_record(now, purged))
    return len(purged)


async def compact_metrics(rt: Runtime) -> int:
    """Fold the metrics rollup rows of writers that are gone (connections closed) into one row
    per key; how many rows were folded. The sums, and so every scrape, are unchanged; the
    table no longer grows with every connection a pool ever opened."""
    return await rt.store.compact_metrics()
