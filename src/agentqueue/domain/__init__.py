"""The pure core: states and transitions, priorities, retries, audit hashing. No I/O here."""

from .errors import (
    AgentQueueError,
    ConfigError,
    Conflict,
    FieldProblem,
    InvalidInput,
    LeaseLost,
    NotFound,
    StoreError,
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
    "Task",
    "TaskState",
    "Transition",
    "TransitionRefused",
    "decide",
    "decide_or_raise",
]
