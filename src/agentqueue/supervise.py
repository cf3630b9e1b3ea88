"""Keeping background loops alive, shared by the worker, ``serve`` and the scheduler.

Two rules (ARCHITECTURE rule 11): a loop that meets a passing database fault
(:class:`StoreUnavailable`) says so once, waits with a growing pause and goes on (:class:`Outage`);
a loop that dies of anything else is logged with its traceback and brings its process down
(:class:`Supervisor`), because a process with a dead loop looks alive while doing nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .domain.errors import LoopFailed, StoreUnavailable

T = TypeVar("T")

FIRST_PAUSE_SECS = 0.2
LONGEST_PAUSE_SECS = 5.0
CANCEL_AGAIN_SECS = 1.0


def cancel_requested() -> bool:
    """Whether the running task has been asked to stop: a loop checks it each round, since on
    Python 3.11 a cancel that meets a timeout expiring at the same moment can be swallowed."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Outage:
    """One loop's view of the database being away: the first failure is logged as a warning
    naming what will be tried again, later ones are not; the first success after them logs
    how long it lasted. The pause between tries doubles from ``first`` up to ``longest``."""

    def __init__(
        self,
        log: logging.Logger,
        first: float = FIRST_PAUSE_SECS,
        longest: float = LONGEST_PAUSE_SECS,
    ) -> None:
        self.log = log
        self.first = first
        self.longest = longest
        self.since: float | None = None
        self._pause = first

    @property
    def ongoing(self) -> bool:
        """Whether the last try failed."""
        return self.since is not None

    def failed(self, exc: BaseException, retrying: str, next_in: float | None = None) -> float:
        """Note a failed try; return the pause before the next. ``retrying`` says what will
        be tried again (``recording 37 outcomes``); ``next_in``, when the caller keeps its own
        pace, when."""
        pause = self._pause
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning(
                "database unavailable (%s); %s again in %g s",
                exc,
                retrying,
                pause if next_in is None else next_in,
            )
        self._pause = min(self._pause * 2, self.longest)
        return pause

    async def wait(self, exc: BaseException, retrying: str) -> None:
        """Note a failed try and pause before the next."""
        await asyncio.sleep(self.failed(exc, retrying))

    def ok(self, what: str = "") -> None:
        """Note a successful try: if the database was away, say it is back."""
        if self.since is not None:
            took = time.monotonic() - self.since
            self.log.info(
                "database reachable again after %.1f s%s", took, f" ({what})" if what else ""
            )
        self.since = None
        self._pause = self.first


async def until_reachable(
    action: Callable[[], Awaitable[T]], log: logging.Logger, retrying: str
) -> T:
    """Run ``action`` until it gets past :class:`StoreUnavailable` (any other error, a
    :class:`StoreMisconfigured` among them, is raised at once)."""
    outage = Outage(log)
    while True:
        try:
            value = await action()
        except StoreUnavailable as exc:
            await outage.wait(exc, retrying)
            continue
        outage.ok(retrying)
        return value


class Supervisor:
    """The background jobs of one process part. A job that raises (other than being
    cancelled) is logged with its traceback and sets :attr:`failed`; the owner then stops
    and raises :class:`LoopFailed` (:meth:`check`). No job is created and forgotten: every one is
    cancelled and awaited by :meth:`close`."""

    def __init__(self, log: logging.Logger, on_failure: Callable[[], None] | None = None) -> None:
        self.log = log
        self.on_failure = on_failure
        self.jobs: set[asyncio.Task[Any]] = set()
        self.failed = asyncio.Event()
        self.failure: tuple[str, BaseException] | None = None

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a job named ``name``."""
        job = asyncio.create_task(coro, name=name)
        self.jobs.add(job)
        job.add_done_callback(self._done)
        return job

    def _done(self, job: asyncio.Task[Any]) -> None:
        self.jobs.discard(job)
        if job.cancelled():
            return
        exc = job.exception()
        if exc is None:
            return
        self.log.error("%s died: %s: %s", job.get_name(), type(exc).__name__, exc, exc_info=exc)
        if self.failure is None:
            self.failure = (job.get_name(), exc)
        self.failed.set()
        if self.on_failure is not None:
            self.on_failure()

    def check(self) -> None:
        """Raise :class:`LoopFailed` if a job died."""
        if self.failure is not None:
            name, exc = self.failure
            raise LoopFailed(f"{name} died: {type(exc).__name__}: {exc}") from exc

    async def close(self, jobs: set[asyncio.Task[Any]] | None = None) -> None:
        """Cancel the jobs (all, or those given) and wait for them to end.

        A job still running a second after its cancel is cancelled again (see
        :func:`cancel_requested`): a stop must not hang on a swallowed cancel."""
        pending = set(self.jobs if jobs is None else jobs)
        while pending:
            for job in pending:
                job.cancel()
            # Their failures were logged as they happened (_done): nothing is lost here.
            _done, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_SECS)

    async def wait_all(self, jobs: set[asyncio.Task[Any]]) -> None:
        """Wait for the given jobs to end by themselves."""
        await asyncio.gather(*list(jobs), return_exceptions=True)
