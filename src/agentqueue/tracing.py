"""Trace context (W3C ``traceparent``) and, with the ``otel`` extra, a span per attempt.

A task keeps the trace context it was submitted in: given as ``traceparent`` (CLI
``--traceparent``, the API's ``traceparent`` header), or taken from the caller's current span when
the caller already uses OpenTelemetry. Each attempt runs in a span that is its child (when
OpenTelemetry is installed and ``[logging] opentelemetry`` is on); the handler runs with that span
current, and a command agent gets it as ``TRACEPARENT``. Without OpenTelemetry the task's own
``traceparent`` is still handed on as it was submitted.

Nothing here imports OpenTelemetry unless it is installed and wanted: the caller's span is read
only when the caller's process has imported ``opentelemetry.trace`` itself.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .domain.models import Task

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def traceparent_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a W3C traceparent (``00-<32 hex>-<16 hex>-<2 hex>``),
    or None."""
    match = _TRACEPARENT.match(value)
    if match is None:
        return "must be a W3C traceparent: 00-<32 hex digits>-<16 hex digits>-<2 hex digits>"
    version, trace_id, span_id, _ = match.groups()
    if version == "ff":
        return "version ff is not allowed"
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return "trace id and parent id must not be all zeros"
    return None


def current_traceparent() -> str | None:
    """The caller's current span as a traceparent, if its process uses OpenTelemetry (has
    imported it) and a valid span is current; else None."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return _format(context)


@cache
def installed() -> bool:
    """Whether OpenTelemetry can be imported (the ``otel`` extra)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def _format(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class AttemptSpan:
    """The span of one attempt, current while the attempt runs (in the attempt's own asyncio
    task, so a thread handler's copied context has it too)."""

    def __init__(self, task: Task) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = (
            TraceContextTextMapPropagator().extract({"traceparent": task.traceparent})
            if task.traceparent
            else None
        )
        self._trace = trace
        self._context = otel_context
        self.span = trace.get_tracer("agentqueue").start_span(
            f"agentqueue.attempt {task.task_type}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "agentqueue.task_id": str(task.id),
                "agentqueue.task_type": task.task_type,
                "agentqueue.attempt": task.retry_count + 1,
                "agentqueue.tenant": task.tenant,
                **({"agentqueue.agent": task.agent} if task.agent else {}),
            },
        )
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        own = self.span.get_span_context()
        self.traceparent = _format(own) if own.is_valid else task.traceparent
        """What the attempt hands on: this span's context (the task's own when no SDK
        records spans)."""

    def end(self, outcome: str, error: str | None = None) -> None:
        """End the span with the attempt's outcome (an error sets its status)."""
        self.span.set_attribute("agentqueue.outcome", outcome)
        if error:
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        self.span.end()
        self._context.detach(self._token)


def load() -> None:
    """Import OpenTelemetry's API now (when installed), so that a worker pays for it as it
    starts rather than in its first attempt's dispatch latency (a tenth of a second on a slow
    machine)."""
    if installed():
        import opentelemetry.trace  # noqa: F401


PROVIDER_LOOK_SECS = 1.0
"""While no tracer provider is set, how long the answer "none" is kept before looking again."""


class _ProviderLook:
    """What this process last found of a tracer provider."""

    found = False
    """A provider is set (OpenTelemetry sets it once: it stays)."""
    missed_at: float | None = None
    """When none was last found (``time.monotonic()``), while none is."""


_look = _ProviderLook()


def _provider_is_set() -> bool:
    """Whether this process has set a tracer provider (an SDK that records spans). While it
    has not, the answer is kept for ``PROVIDER_LOOK_SECS`` (asking costs a few microseconds,
    and every attempt asks)."""
    if _look.found:
        return True
    now = time.monotonic()
    if _look.missed_at is not None and now - _look.missed_at < PROVIDER_LOOK_SECS:
        return False
    from opentelemetry import trace

    _look.found = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    _look.missed_at = None if _look.found else now
    return _look.found


def look_again() -> None:
    """Forget that no tracer provider was found: the next attempt looks again (for a process
    that sets its provider after its worker started and wants it used at once)."""
    _look.missed_at = None


def start_attempt(task: Task, enabled: bool) -> AttemptSpan | None:
    """The span of an attempt of ``task``, started and made current; None when OpenTelemetry
    is off, not installed, or has no tracer provider set (then nothing would be recorded, and
    the task's own traceparent is handed on). A provider set while the worker runs is seen
    within ``PROVIDER_LOOK_SECS``."""
    if not enabled or not installed() or not _provider_is_set():
        return None  # no SDK set up in this process: no span would be recorded
    return AttemptSpan(task)
