"""agentqueue: a durable task queue and scheduler for AI-agent work, on SQLite or PostgreSQL."""

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
