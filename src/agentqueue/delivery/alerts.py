"""Dead-letter alerts (R8), sent from the outbox to the configured webhook.

Each alert is POSTed as JSON: delivered on a 2xx answer; anything else, or no answer, is kept as
the last error and tried again after min(2^n, 300) s. Alerts are never given up. Without a
configured webhook (``[alerts] url``) alerts wait in the outbox (their log lines were written
when they were raised).

The webhook URL may carry a token: it is never logged, nor recorded with an error.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..domain.alerts import ALERT_KIND, alert_backoff_secs, redact
from ..service.runtime import Runtime
from ..store.base import OutboxRow

if TYPE_CHECKING:  # imported where a delivery is sent: a worker starts without it
    import httpx
from .outbox import BATCH, Deliverer, Try

log = logging.getLogger("agentqueue.alerts")

USER_AGENT = "agentqueue-alerts"


class AlertChannel:
    """Alerts to ``[alerts] url``."""

    kind = ALERT_KIND

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @property
    def timeout_secs(self) -> float:
        """``[alerts] timeout_secs``."""
        return self.rt.settings.alerts.timeout_secs

    def ready(self) -> bool:
        """A webhook is configured."""
        return self.rt.settings.alerts.url is not None

    def not_ready_warning(self) -> str:
        """Alerts wait: no webhook."""
        return "dead-letter alerts wait in the outbox: no [alerts] url is configured"

    async def send(self, http: httpx.AsyncClient, row: OutboxRow) -> Try:
        """POST the alert."""
        url = row.url or self.rt.settings.alerts.url
        assert url is not None
        try:
            response = await http.post(
                url, json=row.body, timeout=self.timeout_secs, headers={"User-Agent": USER_AGENT}
            )
        except Exception as exc:  # whatever stopped this try is recorded and tried again later
            return Try(False, error=redact(f"{type(exc).__name__}: {exc}".rstrip(": ")))
        if 200 <= response.status_code < 300:
            return Try(True, response.status_code)
        return Try(False, response.status_code, f"HTTP {response.status_code}")

    def next_try(self, row: OutboxRow, tried: Try, now: datetime) -> datetime | None:
        """min(2^n, 300) s later; never given up."""
        attempts = row.attempts + 1
        delay = alert_backoff_secs(attempts)
        log.warning(
            "alert for P0 task %s not delivered (try %d): %s; next try in %gs",
            row.task_id,
            attempts,
            redact(tried.error or "failed"),
            delay,
        )
        return now + timedelta(seconds=delay)


async def deliver_due_alerts(
    rt: Runtime, client: httpx.AsyncClient | None = None, limit: int = BATCH
) -> int:
    """Send up to ``limit`` due alerts once; return how many were delivered. ``client`` is used
    as given (and left open); without one, a client is made for this call."""
    delivered, _more = await Deliverer(
        rt, [AlertChannel(rt)], client=client, batch=limit
    ).deliver_due()
    return delivered
