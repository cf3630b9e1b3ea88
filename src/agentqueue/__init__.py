"""agentqueue: a durable task queue and scheduler for AI-agent work, on SQLite or PostgreSQL.

The public names are loaded when first used (PEP 562), so that ``agentqueue --help`` and the
one-shot commands do not pay for the HTTP client, the worker and the API they do not need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

if TYPE_CHECKING:
    from .client import AsyncClient, Client
    from .clock import Clock, ManualClock, SystemClock
    from .config import Settings, load_settings
    from .domain.errors import (
        AgentQueueError,
        APIError,
        ConfigError,
        Conflict,
        FieldProblem,
        Forbidden,
        InvalidInput,
        LeaseLost,
        NotFound,
        RateLimited,
        Refused,
        ServerUnreachable,
        StoreError,
        StoreMisconfigured,
        StoreUnavailable,
        TransitionRefused,
        Unauthenticated,
    )
    from .domain.models import Event, Task
    from .domain.states import TaskState
    from .executors.inprocess import Fatal, Retryable, TaskContext
    from .queue import AsyncQueue, Queue
    from .service.execution import HeartbeatReply, Outcome, OutcomeKind
    from .service.reads import Stats, TaskPage
    from .service.submit import SubmitResult
    from .spec import TaskSpec
    from .store import Lease


__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "APIError": "domain.errors",
    "AgentQueueError": "domain.errors",
    "AsyncClient": "client",
    "AsyncQueue": "queue",
    "Client": "client",
    "Clock": "clock",
    "ConfigError": "domain.errors",
    "Conflict": "domain.errors",
    "Event": "domain.models",
    "Fatal": "executors.inprocess",
    "FieldProblem": "domain.errors",
    "Forbidden": "domain.errors",
    "HeartbeatReply": "service.execution",
    "InvalidInput": "domain.errors",
    "Lease": "store",
    "LeaseLost": "domain.errors",
    "ManualClock": "clock",
    "NotFound": "domain.errors",
    "Outcome": "service.execution",
    "OutcomeKind": "service.execution",
    "Queue": "queue",
    "RateLimited": "domain.errors",
    "Refused": "domain.errors",
    "Retryable": "executors.inprocess",
    "ServerUnreachable": "domain.errors",
    "Settings": "config",
    "Stats": "service.reads",
    "StoreError": "domain.errors",
    "StoreMisconfigured": "domain.errors",
    "StoreUnavailable": "domain.errors",
    "SubmitResult": "service.submit",
    "SystemClock": "clock",
    "Task": "domain.models",
    "TaskContext": "executors.inprocess",
    "TaskPage": "service.reads",
    "TaskSpec": "spec",
    "TaskState": "domain.states",
    "TransitionRefused": "domain.errors",
    "Unauthenticated": "domain.errors",
    "load_settings": "config",
}
"""The module each public name lives in (relative to this package)."""


__getattr__ = lazy_names(__name__, _WHERE, globals())


__all__ = [
    "APIError",
    "AgentQueueError",
    "AsyncClient",
    "AsyncQueue",
    "Client",
    "Clock",
    "ConfigError",
    "Conflict",
    "Event",
    "Fatal",
    "FieldProblem",
    "Forbidden",
    "HeartbeatReply",
    "InvalidInput",
    "Lease",
    "LeaseLost",
    "ManualClock",
    "NotFound",
    "Outcome",
    "OutcomeKind",
    "Queue",
    "RateLimited",
    "Refused",
    "Retryable",
    "ServerUnreachable",
    "Settings",
    "Stats",
    "StoreError",
    "StoreMisconfigured",
    "StoreUnavailable",
    "SubmitResult",
    "SystemClock",
    "Task",
    "TaskContext",
    "TaskPage",
    "TaskSpec",
    "TaskState",
    "TransitionRefused",
    "Unauthenticated",
    "load_settings",
]
