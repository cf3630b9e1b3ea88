"""Sending dead-letter alerts (R8) from the outbox to the configured webhook.

A deliverer leases the due alerts in a short transaction (pushing each one's next try
``LEASE_SECS`` ahead, so no other deliverer sends it meanwhile), POSTs each as JSON, and records
the outcome: delivered on a 2xx answer; anything else, or no answer, is kept as the last error
and tried again after min(2^n, 300) s. Alerts are never given up.

The webhook URL may carry a token: it is never logged, nor recorded with an error.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import httpx

from ..domain.alerts import ALERT_KIND, alert_backoff_secs, redact
from ..service.runtime import Runtime
from ..store.base import DeliveryResult, OutboxRow

log = logging.getLogger("agentqueue.alerts")


class _MaskUrls(logging.Filter):
    """httpx logs every request's URL at INFO, and an alert URL may carry a token in its query
    or user info: the URLs in httpx's own lines are masked (scheme, host and path remain)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(
                redact(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


_HTTPX_LOG = logging.getLogger("httpx")
if not any(isinstance(f, _MaskUrls) for f in _HTTPX_LOG.filters):
    _HTTPX_LOG.addFilter(_MaskUrls())

LEASE_SECS = 30.0
"""How long a leased alert is held by its deliverer before another may try it."""
BATCH = 50
"""Alerts sent at once by one call."""
USER_AGENT = "agentqueue-alerts"


async def deliver_due_alerts(
    rt: Runtime, client: httpx.AsyncClient | None = None, limit: int = BATCH
) -> int:
    """Send up to ``limit`` due alerts; return how many were delivered.

    Without a configured webhook (``[alerts] url``) nothing is sent: alerts wait in the outbox
    (their log lines were written when they were raised). ``client`` is used as given (and left
    open); without one, a client is made for this call.
    """
    url = rt.settings.alerts.url
    if url is None:
        return 0
    timeout = rt.settings.alerts.timeout_secs
    now = rt.clock.now()
    # The lease outlasts one request, so a slow webhook is not sent the same alert twice.
    hold = timedelta(seconds=max(LEASE_SECS, timeout + 5.0))
    async with rt.store.transaction() as tx:
        rows = await tx.lease_outbox(ALERT_KIND, now, limit, now + hold)
    if not rows:
        return 0
    http = client or httpx.AsyncClient(timeout=timeout)
    try:
        errors = await asyncio.gather(
            *(_post(http, row.url or url, row.body, timeout) for row in rows)
        )
    finally:
        if client is None:
            await http.aclose()
    at = rt.clock.now()
    results = [_result(row, error, at) for row, error in zip(rows, errors, strict=True)]
    async with rt.store.transaction() as tx:
        await tx.record_deliveries(results)
    return sum(r.delivered for r in results)


async def _post(client: httpx.AsyncClient, url: str, body: Any, wait_secs: float) -> str | None:
    """POST one alert; None when delivered, else what went wrong (without the URL)."""
    try:
        response = await client.post(
            url, json=body, timeout=wait_secs, headers={"User-Agent": USER_AGENT}
        )
    except Exception as exc:  # whatever stopped this try is recorded and tried again later
        return redact(f"{type(exc).__name__}: {exc}".rstrip(": "))
    if 200 <= response.status_code < 300:
        return None
    return f"HTTP {response.status_code}"


def _result(row: OutboxRow, error: str | None, at: datetime) -> DeliveryResult:
    if error is None:
        return DeliveryResult(row.id, at, True)
    attempts = row.attempts + 1
    delay = alert_backoff_secs(attempts)
    log.warning(
        "alert for P0 task %s not delivered (try %d): %s; next try in %gs",
        row.task_id,
        attempts,
        error,
        delay,
    )
    return DeliveryResult(row.id, at, False, error, at + timedelta(seconds=delay))
