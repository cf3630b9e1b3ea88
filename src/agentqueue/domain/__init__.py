"""The pure core: states and transitions, priorities, retries, audit hashing. No I/O here.

The names below are loaded from their modules when first used (PEP 562), so that importing one
module of the package (``domain.errors``, as ``agentqueue --help`` does) does not import them
all (start-up time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .errors import (
        AgentQueueError,
        ConfigError,
        Conflict,
        FieldProblem,
        InvalidInput,
        LeaseLost,
        NotFound,
        StoreError,
        StoreMisconfigured,
        StoreUnavailable,
        TransitionRefused,
    )
    from .models import DEFAULT_TIMEOUTS, Event, Task
    from .states import (
        TERMINAL_STATES,
        TRANSITIONS,
        Action,
        Refusal,
        RefusalKind,
        Request,
        TaskState,
        Transition,
        decide,
        decide_or_raise,
    )

_WHERE: dict[str, str] = {
    "AgentQueueError": "errors",
    "ConfigError": "errors",
    "Conflict": "errors",
    "FieldProblem": "errors",
    "InvalidInput": "errors",
    "LeaseLost": "errors",
    "NotFound": "errors",
    "StoreError": "errors",
    "StoreMisconfigured": "errors",
    "StoreUnavailable": "errors",
    "TransitionRefused": "errors",
    "DEFAULT_TIMEOUTS": "models",
    "Event": "models",
    "Task": "models",
    "TERMINAL_STATES": "states",
    "TRANSITIONS": "states",
    "Action": "states",
    "Refusal": "states",
    "RefusalKind": "states",
    "Request": "states",
    "TaskState": "states",
    "Transition": "states",
    "decide": "states",
    "decide_or_raise": "states",
}
"""The module each name lives in (relative to this package)."""

__getattr__ = lazy_names(__name__, _WHERE, globals())

__all__ = [
    "DEFAULT_TIMEOUTS",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Action",
    "AgentQueueError",
    "ConfigError",
    "Conflict",
    "Event",
    "FieldProblem",
    "InvalidInput",
    "LeaseLost",
    "NotFound",
    "Refusal",
    "RefusalKind",
    "Request",
    "StoreError",
    "StoreMisconfigured",
    "StoreUnavailable",
    "Task",
    "TaskState",
    "Transition",
    "TransitionRefused",
    "decide",
    "decide_or_raise",
]
