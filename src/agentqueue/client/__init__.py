"""The HTTP API from Python: ``AsyncClient`` (asyncio) and ``Client`` (sync), with the method
names and signatures of :class:`~agentqueue.AsyncQueue` and :class:`~agentqueue.Queue` for
everything the API offers.

    import agentqueue
    with agentqueue.Client("http://127.0.0.1:8077", token) as aq:
        made = aq.submit(title="Fix the login bug", task_type="bugfix", priority="P1")
        task = aq.get(made.task.id, wait=60)  # answered when it ends, or after 60 s

They return the queue's own records (Task, SubmitResult, TaskPage, Event, LogRecord, Stats,
Schedule, TokenRecord, ...), decoded from the API's JSON, and raise the queue's own errors,
read from its problem details: 422 InvalidInput (naming each field), 404 NotFound, 403
Forbidden, 409 :class:`~agentqueue.domain.errors.Refused` (a TransitionRefused and a Conflict),
401 Unauthenticated, 429 RateLimited (with ``retry_after``), 413 InvalidInput naming ``body``,
503 StoreUnavailable (StoreMisconfigured when the server does not ask to be tried again), and
ServerUnreachable (a StoreUnavailable) when no answer came; anything else is an APIError.

The server acts as the token: its name is the actor of every change and its tenant bounds
every read and write. Methods that take ``actor`` accept it only so that a client can stand in
for a queue; it is never sent.

Every request is described once, by a builder that returns a :class:`Call` (method, path,
query, body, and how to read the answer). ``AsyncClient`` sends calls with an
``httpx.AsyncClient`` and ``Client`` with an ``httpx.Client``; each keeps its connections alive
in a pool, so close the client (or use it as a context manager) when done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .names import TOKEN_ENV, URL_ENV

if TYPE_CHECKING:
    from .answers import answer, error_for
    from .calls import Call, Calls
    from .http import DEFAULT_TIMEOUT_SECS, AsyncClient, Client

_WHERE = {
    "answer": "answers",
    "error_for": "answers",
    "Call": "calls",
    "Calls": "calls",
    "DEFAULT_TIMEOUT_SECS": "http",
    "AsyncClient": "http",
    "Client": "http",
}
"""The module each name lives in: loaded on first use, so that naming the environment
variables (the command line does) does not load httpx."""


__getattr__ = lazy_names(__name__, _WHERE, globals())


__all__ = [
    "DEFAULT_TIMEOUT_SECS",
    "TOKEN_ENV",
    "URL_ENV",
    "AsyncClient",
    "Call",
    "Calls",
    "Client",
    "answer",
    "error_for",
]
