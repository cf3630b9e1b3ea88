"""The error types every layer raises.

Shells map them to answers: the CLI exits 2 for :class:`InvalidInput` and 1 for the rest; the HTTP
API answers each with its status code, and the HTTP client raises the same type again from that
answer. Messages never carry secrets.
"""

from __future__ import annotations

from dataclasses import dataclass


class AgentQueueError(Exception):
    """Base of every error agentqueue raises on purpose."""


@dataclass(frozen=True)
class FieldProblem:
    """One invalid field: where it is (``priority``, ``tasks[3].payload``) and what is wrong."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidInput(AgentQueueError):
    """Input that cannot be accepted. Names every offending field; nothing has been written."""

    def __init__(self, problems: list[FieldProblem] | FieldProblem | str, field: str = "") -> None:
        if isinstance(problems, str):
            problems = [FieldProblem(field, problems)]
        elif isinstance(problems, FieldProblem):
            problems = [problems]
        self.problems: list[FieldProblem] = problems
        super().__init__("; ".join(str(p) for p in problems))

    @property
    def fields(self) -> list[str]:
        """The names of the offending fields, in order."""
        return [p.field for p in self.problems]


class ConfigError(InvalidInput):
    """The configuration file or an environment override is invalid."""


class NotFound(AgentQueueError):
    """No task (or other object) with that id is visible in this tenant."""


class TransitionRefused(AgentQueueError):
    """The state machine refused a change; ``refusal`` says which and why."""

    def __init__(self, refusal: object) -> None:
        self.refusal = refusal
        super().__init__(str(refusal))


class LeaseLost(TransitionRefused):
    """An executor wrote with a lock_token that no longer holds the task (fencing)."""


class StoreError(AgentQueueError):
    """The database could not be reached or answered with an unexpected error."""


class StoreUnavailable(StoreError):
    """A passing database fault: the connection was lost or refused, the server is starting,
    shutting down or restarting, another writer holds the SQLite file, a serialization failure
    or a deadlock. The loop that meets it waits and tries again; every write is guarded, so
    trying again is safe even when the lost connection had committed."""


class StoreLocked(StoreUnavailable):
    """Another process holds the SQLite file's write lock past the busy timeout: nothing of the
    write that met it was saved (the lock is taken before anything is written)."""


class StoreMisconfigured(StoreError):
    """A database fault that waiting will not mend: authentication failed, no such database,
    a bad URL or connection option, a schema this release cannot use. Fails fast, naming the
    cause."""


class LoopFailed(AgentQueueError):
    """A background loop of a worker or scheduler died of an unexpected error: the process
    stops (exit 1) so that its supervisor starts it afresh, rather than running half-alive."""


class Conflict(AgentQueueError):
    """A guarded write lost a race it could not resolve by retrying."""


class Forbidden(AgentQueueError):
    """The actor is not allowed to do this (an approval by someone who is not an approver)."""


class Unauthenticated(AgentQueueError):
    """No usable API token: missing, malformed, unknown, revoked or expired (the reason says
    which, never the secret). HTTP 401."""


class RateLimited(AgentQueueError):
    """A token made more requests than ``[api] requests_per_minute`` allows; ``retry_after``
    says how many seconds to wait. HTTP 429."""

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(
            message or f"too many requests for this token; try again in {retry_after:.1f} s"
        )


class Refused(TransitionRefused, Conflict):
    """The HTTP API answered 409: the state machine refused the change (cancelling a task that
    has ended, say) or a write met one it conflicts with (a token name already taken). The
    answer does not say which, so this is both: ``except TransitionRefused`` and ``except
    Conflict`` each catch it, as they would the local queue's error. ``refusal`` is the
    server's words."""


class ServerUnreachable(StoreUnavailable):
    """The HTTP API could not be reached, or the connection failed before an answer came
    (refused, reset, timed out). Like any StoreUnavailable it may pass; a request whose answer
    was lost may have been carried out, so send it again only if it is safe to repeat (a
    submit with an ``idempotency_key`` is)."""


class APIError(AgentQueueError):
    """An answer of the HTTP API that no other error type fits (a 500, say); ``status`` is its
    HTTP status and ``error_id`` the id the server logged the error under, if it gave one."""

    def __init__(self, status: int, message: str, error_id: str | None = None) -> None:
        self.status = status
        self.error_id = error_id
        super().__init__(message)
