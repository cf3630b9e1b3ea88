"""The one deliverer of the outbox: alerts (R8), callbacks (R17) and replies on GitHub issues.

Each kind is a :class:`Channel` (how one delivery is sent, how long a try may take, when to try
again). A round, for each ready channel: lease the due deliveries of its kind in a short
transaction (each under this round's lease token, due again only after the lease, which outlasts
a whole try), send them concurrently, then record every try in one transaction. Recording is
fenced by the lease token: a deliverer whose lease lapsed (it stalled, another took the delivery
over) records nothing. Deliveries a stopping deliverer leased and did not record are released,
due at once, so the next deliverer sends them without waiting for the lease to lapse.

:meth:`Deliverer.run` is the loop every worker, ``serve`` and scheduler process runs: woken by
notices of stored deliveries (and, without push notifications, by any commit), it reads when the
next delivery is due (one index read) and sleeps until then, five seconds at most. It keeps going
through a database outage (said once, tried again with a growing pause).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from uuid import UUID, uuid4

from ..domain.alerts import redact
from ..domain.errors import AgentQueueError, StoreUnavailable
from ..service.runtime import Runtime
from ..store.base import CHANNEL_OUTBOX, DeliveryResult, OutboxRow
from ..supervise import Outage, cancel_requested
from ..wakeups import follow, wait_event

if TYPE_CHECKING:  # imported where a delivery is sent: a worker starts without it
    import httpx

log = logging.getLogger("agentqueue.deliveries")

BATCH = 50
"""Deliveries of one kind leased and sent at once by one round."""
POLL_SECS = 5.0
"""The longest a running deliverer sleeps without a notice."""
MIN_GAP_SECS = 0.1
"""The shortest pause between looks (every commit is a notice on SQLite)."""
MAX_ROUNDS = 4
"""Rounds one running deliverer has under way at once."""
WARN_CHECK_SECS = 30.0
"""How often a deliverer looks for deliveries waiting on a channel that is not configured
(until it has warned about them once)."""


class _MaskUrls(logging.Filter):
    """httpx logs every request's URL at INFO, and a webhook or callback URL may carry a token
    in its query or user info: the URLs in httpx's own lines are masked (scheme, host and path
    remain)."""

    def filter(self, record: logging.LogRecord) -> bool:
        httpx = sys.modules.get("httpx")  # none of its URLs before it is imported
        if httpx is None or not isinstance(record.args, tuple):
            return True
        if any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(
                redact(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


_HTTPX_LOG = logging.getLogger("httpx")
if not any(isinstance(f, _MaskUrls) for f in _HTTPX_LOG.filters):
    _HTTPX_LOG.addFilter(_MaskUrls())


@dataclass(frozen=True)
class Try:
    """How one try went: delivered, or not (``error``, never holding a secret), perhaps with the
    receiver's word on when to come back (``retry_at``), or never to try again (``give_up``)."""

    delivered: bool
    status_code: int | None = None
    error: str | None = None
    give_up: bool = False
    retry_at: datetime | None = None


class Channel(Protocol):
    """One kind of delivery."""

    kind: str

    @property
    def timeout_secs(self) -> float:
        """The longest one whole try may take (the lease outlasts it)."""

    def ready(self) -> bool:
        """Whether this kind can be sent now (its destination or secret is configured); when
        not, its deliveries wait in the outbox."""

    def not_ready_warning(self) -> str:
        """What to log (once) when deliveries wait because the channel is not ready."""

    async def send(self, http: httpx.AsyncClient, row: OutboxRow) -> Try:
        """Make one try (without raising: what failed is the Try's error)."""

    def next_try(self, row: OutboxRow, tried: Try, now: datetime) -> datetime | None:
        """When to try a failed delivery again (``row.attempts`` tries before this one), or None
        to give it up."""


def lease_secs(channel: Channel) -> float:
    """How long a round holds what it leased: a whole try and a margin for recording it."""
    return channel.timeout_secs + max(1.0, channel.timeout_secs * 0.25)


class Deliverer:
    """Sends due deliveries of the given channels (see module doc)."""

    def __init__(
        self,
        rt: Runtime,
        channels: Sequence[Channel],
        *,
        client: httpx.AsyncClient | None = None,
        batch: int = BATCH,
        poll_secs: float = POLL_SECS,
    ) -> None:
        self.rt = rt
        self.channels = list(channels)
        self.client = client
        self.batch = batch
        self.poll_secs = poll_secs
        self.wake = asyncio.Event()
        """Set it to look for due deliveries now (a notice of stored deliveries)."""
        self.held: set[UUID] = set()
        """Lease tokens of rounds under way: released if this deliverer stops mid-round."""
        self._warned: set[str] = set()
        self._next_warn_check = 0.0
        self._outage = Outage(log)

    def ready(self) -> list[Channel]:
        """The channels that can send now."""
        return [c for c in self.channels if c.ready()]

    async def deliver_due(self, kinds: Sequence[str] | None = None) -> tuple[int, bool]:
        """One round over the ready channels (of ``kinds``, if given): return how many were
        delivered, and whether a channel had more due than one batch."""
        delivered, more = 0, False
        for channel in self.ready():
            if kinds is not None and channel.kind not in kinds:
                continue
            n, full = await self._round(channel)
            delivered += n
            more = more or full
        return delivered, more

    async def _round(self, channel: Channel) -> tuple[int, bool]:
        rt = self.rt
        token = uuid4()
        now = rt.clock.now()
        # Until this round records its tries, what it leased is held: a round stopped or failed
        # midway leaves the token in ``held``, released on the way out (or the lease lapses).
        self.held.add(token)
        async with rt.store.transaction() as tx:
            rows = await tx.lease_outbox(
                channel.kind, now, self.batch, now + timedelta(seconds=lease_secs(channel)), token
            )
        if not rows:
            self.held.discard(token)
            return 0, False
        if self.client is None:
            import httpx

            http = httpx.AsyncClient(timeout=channel.timeout_secs)
        else:
            http = self.client
        try:
            tries = await asyncio.gather(*(self._try(channel, http, row) for row in rows))
        finally:
            if self.client is None:
                await http.aclose()
        at = rt.clock.now()
        results = [
            self._result(channel, row, tried, ms, at)
            for row, (tried, ms) in zip(rows, tries, strict=True)
        ]
        async with rt.store.transaction() as tx:
            recorded = await tx.record_deliveries(results)
        self.held.discard(token)
        lost = [r for r in results if r.id not in recorded]
        for result in lost:
            log.warning(
                "%s delivery %d: the lease lapsed before its try was recorded (another "
                "deliverer has it)",
                channel.kind,
                result.id,
            )
        return sum(r.delivered for r in results if r.id in recorded), len(rows) == self.batch

    async def _try(
        self, channel: Channel, http: httpx.AsyncClient, row: OutboxRow
    ) -> tuple[Try, float]:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(channel.timeout_secs):
                tried = await channel.send(http, row)
        except TimeoutError:
            tried = Try(False, error=f"no answer within {channel.timeout_secs:g} s")
        except Exception as exc:  # a channel bug must not lose the round's other results
            tried = Try(False, error=redact(f"{type(exc).__name__}: {exc}".rstrip(": ")))
        return tried, (time.perf_counter() - started) * 1000.0

    def _result(
        self, channel: Channel, row: OutboxRow, tried: Try, ms: float, at: datetime
    ) -> DeliveryResult:
        common = {"lease_token": row.lease_token, "status_code": tried.status_code}
        if tried.delivered:
            return DeliveryResult(row.id, at, True, duration_ms=ms, **common)  # type: ignore[arg-type]
        error = redact(tried.error or "failed")
        next_at = None if tried.give_up else channel.next_try(row, tried, at)
        if next_at is None:
            log.warning(
                "%s for task %s given up after %d tries: %s",
                channel.kind,
                row.task_id,
                row.attempts + 1,
                error,
            )
            return DeliveryResult(
                row.id,
                at,
                False,
                error,
                None,
                given_up=True,
                duration_ms=ms,
                **common,  # type: ignore[arg-type]
            )
        return DeliveryResult(row.id, at, False, error, next_at, duration_ms=ms, **common)  # type: ignore[arg-type]

    async def release(self) -> int:
        """Hand back what this deliverer leased and did not record (due at once)."""
        if not self.held:
            return 0
        tokens = sorted(self.held, key=str)
        async with self.rt.store.transaction() as tx:
            n = await tx.release_outbox(tokens, self.rt.clock.now())
        self.held.difference_update(tokens)
        return n

    async def finish(self, patience_secs: float | None = None) -> int:
        """Before a process exits by itself (``--until-idle``): one try of each delivery due now,
        then release whatever is still held. Returns how many were delivered."""
        delivered = 0
        patience = patience_secs
        if patience is None:
            patience = max((lease_secs(c) for c in self.channels), default=10.0) + 5.0
        try:
            async with asyncio.timeout(patience):
                delivered, _more = await self.deliver_due()
        except (TimeoutError, AgentQueueError) as exc:
            log.warning("deliveries before exit not all made: %s", exc or "out of time")
        finally:
            try:
                await asyncio.shield(self.release())
            except AgentQueueError as exc:
                log.warning("leased deliveries not released (they are tried again later): %s", exc)
        return delivered

    async def run(self) -> None:
        """Deliver until cancelled; on the way out, stop the rounds under way and release what
        is held. Rounds run beside the loop (up to ``MAX_ROUNDS`` at once), so a slow receiver
        holding one round up does not hold up deliveries stored after it began."""
        rounds: set[asyncio.Task[None]] = set()
        try:
            while True:
                if cancel_requested():
                    raise asyncio.CancelledError  # a cancel a timeout swallowed (Python 3.11)
                pause = await self._step(rounds)
                if pause > 0:
                    await wait_event(self.wake, pause)
                self.wake.clear()
                await asyncio.sleep(MIN_GAP_SECS)
        finally:
            for job in rounds:
                job.cancel()
            await asyncio.gather(*rounds, return_exceptions=True)
            try:
                await asyncio.shield(self.release())
            except (AgentQueueError, OSError) as exc:
                log.warning("leased deliveries not released (they are tried again later): %s", exc)

    async def listen(self) -> None:
        """Wake on notices of stored deliveries until cancelled (a process without a worker's
        listener: ``agentqueue scheduler``)."""
        await follow(self.rt.store, (CHANNEL_OUTBOX,), lambda _n: self.wake.set(), "deliverer")

    async def _step(self, rounds: set[asyncio.Task[None]]) -> float:
        """One look (starting a round if something is due and a round is free); the pause
        before the next look."""
        store, clock = self.rt.store, self.rt.clock
        ready = self.ready()
        kinds = [c.kind for c in ready]
        try:
            await self._warn_waiting(ready)
            due = await store.next_outbox_due(kinds)
        except StoreUnavailable as exc:
            return self._outage.failed(exc, "deliveries")
        except AgentQueueError as exc:
            log.warning("looking for due deliveries failed: %s", exc)
            return self.poll_secs
        self._outage.ok("deliveries")
        if due is not None and due <= clock.now():
            if len(rounds) >= MAX_ROUNDS:
                return self.poll_secs  # a round that ends wakes the loop
            job = asyncio.create_task(self._round_in_background(), name="agentqueue-deliver-round")
            rounds.add(job)
            job.add_done_callback(rounds.discard)
            return 0.0  # look again (after the gap): the new round has leased what was due
        if due is None:
            return self.poll_secs
        return min(self.poll_secs, max(0.0, (due - clock.now()).total_seconds()))

    async def _round_in_background(self) -> None:
        try:
            await self.deliver_due()
        except StoreUnavailable as exc:
            self._outage.failed(exc, "deliveries")
        except AgentQueueError as exc:
            log.warning("delivery round failed: %s", exc)
        finally:
            self.wake.set()

    async def _warn_waiting(self, ready: Sequence[Channel]) -> None:
        waiting = [c for c in self.channels if c not in ready and c.kind not in self._warned]
        now = time.monotonic()
        if not waiting or now < self._next_warn_check:
            return
        self._next_warn_check = now + WARN_CHECK_SECS
        for channel in waiting:
            if await self.rt.store.next_outbox_due([channel.kind]) is not None:
                self._warned.add(channel.kind)
                log.warning(channel.not_ready_warning())
