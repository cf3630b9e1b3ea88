"""One leader (R21): a lease row in the database, the same on PostgreSQL and SQLite.

Whoever holds an unexpired lease leads. The leader renews it every ``renew_secs``; a leader that
dies stops renewing, and ``leader_ttl_secs`` after its last renewal any other scheduler takes
over (with a new term). A leader that cannot renew in time stops acting as leader before its
lease runs out, by its own reading of the clock, so two leaders never act at once as long as
the clocks agree to within that margin.

Correctness never rests on this: every step fences its own writes (guarded updates, locked rows,
the admission lock, idempotency keys), so a stale leader can waste work but not break any rule.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ..domain.errors import AgentQueueError, StoreUnavailable
from ..service.records import LEADERSHIP
from ..service.runtime import Runtime
from ..supervise import Outage

log = logging.getLogger("agentqueue.scheduler")


class Leadership:
    """This process's claim on the leadership ``name``."""

    def __init__(self, rt: Runtime, holder: str, name: str = LEADERSHIP) -> None:
        self.rt = rt
        self.holder = holder
        self.name = name
        self.term: int | None = None
        self._valid_until: datetime | None = None
        self._renewed_at: datetime | None = None
        self._outage = Outage(log)

    @property
    def _ttl(self) -> float:
        return self.rt.settings.scheduler.leader_ttl_secs

    def leading(self) -> bool:
        """Whether this process may act as leader now."""
        return self._valid_until is not None and self.rt.clock.now() < self._valid_until

    def renewal_due(self) -> bool:
        """Whether it is time to take or renew the lease."""
        if self._renewed_at is None or not self.leading():
            return True
        interval = timedelta(seconds=self.rt.settings.scheduler.renew_secs)
        return self.rt.clock.now() >= self._renewed_at + interval

    async def hold(self) -> bool:
        """Take or renew the lease when due; return whether this process leads."""
        if not self.renewal_due():
            return True
        now = self.rt.clock.now()
        try:
            term = await self.rt.store.lead(self.name, self.holder, now, self._ttl)
        except AgentQueueError as exc:
            if isinstance(exc, StoreUnavailable):
                self._outage.failed(
                    exc, "renewing the scheduler lease", self.rt.settings.scheduler.renew_secs
                )
            else:
                log.warning("could not renew the scheduler lease: %s", exc)
            term = None
            if self.leading():
                return True  # still within our lease: try again on the next pass
        else:
            self._outage.ok("scheduler lease")
        if term is None:
            if self.term is not None:
                log.info("%s is no longer the scheduler leader", self.holder)
            self.term = None
            self._valid_until = self._renewed_at = None
            return False
        if term != self.term:
            log.info("%s leads the scheduler (term %d)", self.holder, term)
        self.term = term
        self._renewed_at = now
        # Stop acting a renewal interval before the lease runs out, so a successor that takes
        # over at expiry never overlaps with this process.
        margin = self.rt.settings.scheduler.renew_secs
        self._valid_until = now + timedelta(seconds=self._ttl - margin)
        return True

    async def resign(self) -> None:
        """Hand the leadership back at once (on a clean stop), so a successor need not wait."""
        if self.term is None:
            return
        self.term = None
        self._valid_until = self._renewed_at = None
        try:
            await self.rt.store.resign(self.name, self.holder)
        except AgentQueueError as exc:
            log.warning("could not resign the scheduler lease: %s", exc)
