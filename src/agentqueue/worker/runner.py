"""The worker: wires its parts together and runs each attempt from claim to outcome.

The parts, one module each: the claimer (claims for free slots), the outcome flusher (group
commit of outcomes and logs), the lease keeper (heartbeats, and stopping attempts before a lease
lapses), notice routing (listener to wake-ups), tool runs and preemption. It waits for work by
notification (LISTEN/NOTIFY on PostgreSQL; on SQLite, a cheap read of ``PRAGMA data_version``)
with a slow poll as a safety net, never by a tight loop. Unless told not to, it also runs a
scheduler (see scheduler.loop), which competes for the leadership.

While the database is away every part keeps going (each says so once and tries again); a part
that dies of an unexpected error stops the worker with :class:`LoopFailed`, for its supervisor
to start it afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ..delivery import Deliverer, deliverer
from ..domain.errors import AgentQueueError, ConfigError, InvalidInput
from ..domain.models import LogRecord, Task
from ..domain.retry import failure_is_retryable
from ..domain.states import Refusal
from ..domain.tools import next_tool_call_id
from ..executors.base import AttemptControl, AttemptEnd, AttemptResult, Executor
from ..scheduler.loop import Scheduler
from ..scheduler.steps import PERIODIC_STEPS
from ..service import threads
from ..service.execution import Outcome, OutcomeKind
from ..service.execution import claim_in as execution_claim_in
from ..service.tools import take_tool_calls
from ..store.base import Later, Tx
from ..supervise import Supervisor, until_reachable
from ..tracing import installed as tracing_installed
from ..tracing import load as load_tracing
from ..tracing import start_attempt
from ..wakeups import wait_event
from .claimer import Claimer
from .flusher import OutcomeFlusher
from .lease_keeper import LeaseKeeper
from .notices import NoticeRouter, Wakeups
from .port import WorkQueue
from .preemption import Preemptor
from .presence import Presence
from .running import Running
from .summary import RunSummary
from .tools import ToolRunner
from .transitions import recorded as log_recorded

log = logging.getLogger("agentqueue.worker")

SHUTDOWN = "the worker is shutting down"


def default_worker_id() -> str:
    """``host-pid``: unique among live workers, readable in the audit log."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerOptions:
    """How a worker runs. ``None`` heartbeat means: every 0.5 s on stores without push
    notifications (cancels reach the worker in the heartbeat reply), else a third of the lease."""

    worker_id: str = field(default_factory=default_worker_id)
    concurrency: int = 10
    run_scheduler: bool = True
    grace_secs: float = 30.0
    heartbeat_secs: float | None = None
    poll_secs: float = 1.0
    cancel_grace_secs: float = 0.5
    scheduler_min_gap_secs: float = 0.05
    claim_batch: int = 100
    claims_in_flight: int = 2
    flushes_in_flight: int = 2
    tool_timeout_secs: float = 600.0
    """A tool call's timeout when the task does not give one."""
    tool_concurrency: int = 10
    """Tool calls this worker's tool runners make at once."""
    tool_lease_secs: float = 60.0
    yield_grace_secs: float = 5.0
    preempt: bool = True
    preempt_after_secs: float = 3.0
    """Preemption (R11): a P0 task waits, every slot is busy: a task of priority at least
    ``preempt_min_priority`` that ran longer than this is asked to yield its slot."""
    preempt_min_priority: int = 7
    lease_guard: float = 0.8
    """Heartbeats failing for this fraction of ``lease_ttl_secs``: running attempts are
    stopped (no outcome recorded) before their leases lapse."""
    deliver: bool = True
    """Run a deliverer of the outbox (callbacks, replies, alerts) in this worker."""
    deliver_before_exit: bool = False
    """On stopping, try each delivery due then once before exiting (``--until-idle``)."""
    database: str = ""
    """Which database, fit to print (``describe_url``), for the start line."""
    origin: str = ""
    """Where the database URL and settings came from, for the start line."""
    tuning: str = ""
    """The speed settings and which were derived (``Tuning.describe``), for the start line."""


def check_executors(executors: Sequence[Executor]) -> None:
    """A task type is served by handlers or by agents, not both (several agents may share a
    type: routing tells them apart); raise ConfigError naming a clash."""
    handlers: dict[str, str] = {}
    agents: dict[str, str] = {}
    for executor in executors:
        mine, other = (agents, handlers) if executor.agents else (handlers, agents)
        for task_type in executor.task_types:
            clash = other.get(task_type) or (None if executor.agents else mine.get(task_type))
            if clash is not None:
                raise ConfigError(
                    f"task type {task_type!r} is served by both {clash} and {executor.name}",
                    "agents",
                )
            mine.setdefault(task_type, executor.name)


class Worker:
    """Runs tasks from one queue through its executors until stopped."""

    def __init__(
        self,
        queue: WorkQueue,
        executors: Sequence[Executor],
        options: WorkerOptions,
        tools: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        check_executors(executors)
        self.tools = dict(tools or {})
        if not executors and not self.tools:
            raise ConfigError("nothing to run: no handlers, tools or agents registered", "agents")
        self.queue = queue
        self.executors = list(executors)
        self.options = options
        self.id = options.worker_id
        self._running: dict[UUID, Running] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._grace: float = options.grace_secs
        self._stopped = asyncio.Event()
        self.started = asyncio.Event()
        self.scheduler: Scheduler | None = None
        self.deliverer: Deliverer | None = None
        self.jobs = Supervisor(log, on_failure=self._wake.set)
        """Every background job of this worker (its parts, claims, attempts, tool calls)."""
        self.claimer = Claimer(
            self._claim,
            self._polled_hints,
            self.executors,
            self._running,
            self._start,
            self.jobs,
            concurrency=options.concurrency,
            batch=options.claim_batch,
            in_flight=options.claims_in_flight,
            on_dry=self._scheduler_look,
            on_claimed=self._wake.set,
            claims_admit=queue.settings.claims_admit,
        )
        self._tracing = queue.settings.logging.opentelemetry and tracing_installed()
        self.summary = RunSummary()
        """How the tasks this worker claimed ended in its run."""
        self.flusher = OutcomeFlusher(
            self._finish, self.jobs, options.flushes_in_flight, self._recorded
        )
        self.lease_keeper = LeaseKeeper(
            self._heartbeat,
            self._running,
            interval_secs=self._heartbeat_interval(),
            lease_secs=queue.settings.queue.lease_ttl_secs,
            guard=options.lease_guard,
            pending=self.flusher.ended_tasks,
        )
        self.tool_runner = ToolRunner(
            self.tools,
            self._take_tool_calls,
            self._answer_tool_call,
            self.jobs,
            concurrency=options.tool_concurrency,
            poll_secs=options.poll_secs,
        )
        self.preemptor = Preemptor(
            self.executors,
            self._running,
            self._queued_p0,
            queue.clock.now,
            self.jobs,
            enabled=options.preempt,
            after_secs=options.preempt_after_secs,
            min_priority=options.preempt_min_priority,
        )
        self.presence = Presence(
            self._record_presence, lambda: len(self._running), max(2.0, self._heartbeat_interval())
        )
        self.notices = NoticeRouter(
            queue.store,
            self._work_hints,
            Wakeups(
                revoke=self.lease_keeper.revoke,
                tools=self.tool_runner.wake.set,
                work=self._work_arrived,
                routed=self._routed_work_arrived,
                p0=self.preemptor.p0_queued,
                scheduler=self._scheduler_wake,
                deliveries=self._deliveries_wake,
            ),
            self.jobs,
            pending_is_work=queue.settings.claims_admit,
        )

    # --- control ------------------------------------------------------------------------------

    def stop(self, grace_secs: float | None = None) -> None:
        """Stop claiming; let running attempts finish for the grace period, then release the
        rest back to the queue (not counted as retries)."""
        if grace_secs is not None:
            self._grace = grace_secs
        self._stopping = True
        self._wake.set()

    @property
    def running(self) -> int:
        """Attempts in progress."""
        return len(self._running)

    @property
    def concurrency(self) -> int:
        """Slots in all."""
        return self.options.concurrency

    @property
    def stats(self) -> dict[str, int]:
        """What this worker did so far: tasks claimed and how they ended (see
        :class:`RunSummary`), claims made, attempts the lease guard stopped, tool calls run."""
        return {
            **self.summary.counts(),
            "claims": self.claimer.claimed,
            "guarded": self.lease_keeper.guarded,
            "tool_calls": self.tool_runner.calls,
        }

    def summary_line(self) -> str:
        """The run's summary in words, as printed when the worker stops."""
        extra = [
            f"{n} {what}"
            for n, what in (
                (self.lease_keeper.guarded, "stopped by the lease guard"),
                (self.tool_runner.calls, "tool calls run"),
            )
            if n
        ]
        return "; ".join([self.summary.line(), *extra])

    def request_heartbeat(self, task_id: UUID) -> None:
        """Heartbeat soon (a handler asked to renew its lease)."""
        self.lease_keeper.beat()

    # --- what the parts call ------------------------------------------------------------------

    async def _claim(self, n: int, task_types: Sequence[str], agents: Sequence[str]) -> list[Task]:
        return await self.queue.claim(n, self.id, task_types, agents)

    async def _hand_over(
        self, tx: Tx, now: datetime, agents: frozenset[str | None]
    ) -> Callable[[bool], None]:
        """Claim, inside the admission this worker's scheduler is writing, what it admitted
        that this worker has room for (see Claimer.claim_within)."""
        if self._stopping:
            return lambda committed: None
        rt = await self.queue.runtime()

        async def claim_in(
            n: int, task_types: Sequence[str], of: Sequence[str]
        ) -> Later[list[Task]]:
            return await execution_claim_in(tx, rt, n, self.id, task_types, of, now)

        return await self.claimer.claim_within(claim_in, agents)

    async def _work_hints(self) -> Any:
        """What work exists now (a notice said something changed: read afresh)."""
        return await (await self.queue.runtime()).work_hints()

    async def _polled_hints(self) -> Any:
        """What work exists, for the claimer's poll: the hints this process's scheduler read in
        the last poll interval if it did (it reads them every tick while it leads), else a read."""
        return await (await self.queue.runtime()).work_hints(self.options.poll_secs)

    async def _finish(self, outcomes: list[Outcome], logs: list[LogRecord]) -> Any:
        return await self.queue.finish(outcomes, actor=self.id, logs=logs)

    def _recorded(self, batch: Sequence[Outcome], done: Mapping[UUID, Task | Refusal]) -> None:
        self.summary.recorded(batch, done)
        log_recorded(batch, done)

    async def _heartbeat(self, tasks: list[Task]) -> Any:
        return await self.queue.heartbeat(tasks)

    async def _take_tool_calls(self, names: list[str], room: int) -> Any:
        return await take_tool_calls(
            await self.queue.runtime(), names, self.id, room, self.options.tool_lease_secs
        )

    async def _answer_tool_call(self, task_id: UUID, call_id: str, value: Any) -> object:
        return await self.queue.submit_tool_result(task_id, call_id, value, actor=self.id)

    async def _record_presence(self, busy: int) -> None:
        store = self.queue.store
        await store.record_worker(self.id, self.options.concurrency, busy, self.queue.clock.now())

    async def _queued_p0(self) -> Any:
        # When claims admit (a global cap alone), a P0 task waits in pending for a claim.
        now = self.queue.clock.now() if self.queue.settings.claims_admit else None
        return await self.queue.store.queued_p0(pending_at=now)

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Work until :meth:`stop` is called, then shut down gracefully. A database that is
        away at start is waited for; a background part that dies raises LoopFailed (after
        the running attempts are released)."""
        await until_reachable(self.queue.open, log, "opening the database")
        store = self.queue.store
        jobs = self.jobs
        loops = {
            jobs.start(self.notices.run(), "agentqueue-listen"),
            jobs.start(self.lease_keeper.run(), "agentqueue-heartbeat"),
            jobs.start(self.flusher.run(), "agentqueue-flush"),
            jobs.start(self.presence.run(), "agentqueue-presence"),
        }
        if self.tools:
            loops.add(jobs.start(self.tool_runner.run(), "agentqueue-tools"))
        if self.options.deliver:
            # Woken by the worker's listener (notices of stored deliveries).
            self.deliverer = deliverer(await self.queue.runtime())
            loops.add(jobs.start(self.deliverer.run(), "agentqueue-deliver"))
        if self.options.run_scheduler:
            # The worker's listener wakes it; what it admits wakes the worker's claims.
            self.scheduler = Scheduler(
                await self.queue.runtime(),
                self.id,
                on_admitted=self._work_arrived,
                hand_over=self._hand_over,
                listen=False,
                min_gap_secs=self.options.scheduler_min_gap_secs,
                periodic=PERIODIC_STEPS,
            )
            loops.add(jobs.start(self.scheduler.run(), "agentqueue-schedule"))
        origin = f" ({self.options.origin})" if self.options.origin else ""
        tuning = self.options.tuning or (
            f"concurrency {self.options.concurrency}, claim batch {self.options.claim_batch}, "
            f"claims in flight {self.options.claims_in_flight}, outcome writes in flight "
            f"{self.options.flushes_in_flight}"
        )
        log.info(
            "worker %s started on %s%s: %s; %s",
            self.id,
            self.options.database or store.dialect,
            origin,
            ", ".join(f"{e.name}({','.join(sorted(e.task_types))})" for e in self.executors),
            tuning,
        )
        # The first claims go out before the rest of the start-up's own work, which then runs
        # while the database answers them: waiters on ``started`` (the CLI freezes the startup
        # heap, a full collection; the claims under way are frozen with it and freed as usual
        # when done) wake after the claims' first steps, and OpenTelemetry's API (imported now,
        # not in the first attempt's dispatch) after them. The first claim goes out 24 ms
        # sooner (benchmarks/drain_ab.py); the drain's rate is the same, the work only moved.
        self.claimer.fill()
        self.started.set()
        if self._tracing:
            asyncio.get_running_loop().call_soon(load_tracing)
        try:
            while not self._stopping and jobs.failure is None:
                self.claimer.fill()
                if not await wait_event(self._wake, self.options.poll_secs):
                    await self.claimer.poll()
                self._wake.clear()
            self._stopping = True
            if jobs.failure is not None:
                self._grace = 0.0
            # Tasks claimed by claims under way are run (or released) like the others.
            await jobs.wait_all(self.claimer.claiming)
            await self._drain()
        finally:
            attempts = {r.job for r in self._running.values() if r.job is not None}
            await jobs.close(jobs.jobs - attempts - self.flusher.writing)
            # No batch is started any more; end those under way, then write what is left.
            await self.flusher.close(patience_secs=self.queue.settings.queue.lease_ttl_secs)
            if self.deliverer is not None and self.options.deliver_before_exit:
                # The deliverer's loop has stopped (and released what it held): one try of
                # each delivery due now, the last outcomes' among them.
                await self.deliverer.finish()
            for executor in self.executors:
                close = getattr(executor, "close", None)
                if close is not None:
                    close()
            # Best effort: a worker whose row stays (a database away) shows its last beat's age.
            with contextlib.suppress(AgentQueueError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self.queue.store.forget_worker(self.id)
            self._stopped.set()
            log.info("worker %s stopped: %s", self.id, self.summary_line())
        jobs.check()

    def _start(self, task: Task, executor: Executor, claimed_at: float) -> None:
        deadline_in = float(task.timeout_secs)
        if task.locked_at is not None:
            elapsed = (self.queue.clock.now() - task.locked_at).total_seconds()
            deadline_in = max(0.0, task.timeout_secs - max(0.0, elapsed))
        token = task.lock_token
        assert token is not None

        async def save_checkpoint(value: object) -> bool:
            try:
                return await self.queue.store.save_checkpoint(task.id, token, value)
            except AgentQueueError as exc:
                log.warning("checkpoint of task %s not kept: %s", task.id, exc)
                return False

        async def send_reply(body: object) -> str | None:
            try:
                await threads.send_reply(await self.queue.runtime(), task, body)
            except InvalidInput as exc:
                return str(exc)
            return None

        control = AttemptControl(
            deadline=time.monotonic() + deadline_in,
            timeout_secs=float(task.timeout_secs),
            cancel_grace_secs=self.options.cancel_grace_secs,
            yield_grace_secs=self.options.yield_grace_secs,
            save_checkpoint=save_checkpoint,
            send_reply=send_reply,
        )
        running = Running(task, executor, control, renewed_at=claimed_at)
        self.summary.claimed(task)
        self._running[task.id] = running
        running.job = self.jobs.start(self._attempt(running), "agentqueue-" + task.id_text)

    async def _attempt(self, running: Running) -> None:
        task, control = running.task, running.control
        span = start_attempt(task, self._tracing) if self._tracing else None
        result: AttemptResult | None = None
        try:
            try:
                # With a span, the executor hands on its context (TRACEPARENT) instead.
                run = task if span is None else task.evolve(traceparent=span.traceparent)
                result = await running.executor.run(run, control)
            except Exception as exc:  # an executor bug must not take the worker down
                log.exception("executor %s failed on task %s", running.executor.name, task.id)
                result = AttemptResult(
                    AttemptEnd.FAILED, error=f"executor error: {type(exc).__name__}: {exc}"
                )
            finally:
                if span is not None:  # no result: the worker itself is being torn down
                    span.end(*((result.end.value, result.error) if result else ("stopped",)))
            # Output belongs to the attempt, reported or not (a revoked attempt reports none).
            self.flusher.add(self._outcome(task, control, result), self._records(task, result))
        finally:
            self._running.pop(task.id, None)
            self._wake.set()

    def _records(self, task: Task, result: AttemptResult) -> tuple[LogRecord, ...]:
        if not result.logs:
            return ()
        now = self.queue.clock.now()
        attempt = task.retry_count + 1
        return tuple(
            LogRecord(task.id, task.tenant, attempt, chunk.stream, now, chunk.text, chunk.truncated)
            for chunk in result.logs
        )

    def _outcome(
        self, task: Task, control: AttemptControl, result: AttemptResult
    ) -> Outcome | None:
        assert task.lock_token is not None
        if result.end is AttemptEnd.CANCELLED:
            if control.cancel_reason == SHUTDOWN:
                return Outcome(
                    task.id, task.lock_token, OutcomeKind.RELEASED, reason=SHUTDOWN, claimed=task
                )
            # Revoked, cancelled, lease lost, or stopped by the lease guard: the task is not
            # ours any more (or soon will not be), so nothing is reported.
            self.summary.no_outcome(task)
            return None
        if result.end is AttemptEnd.COMPLETED:
            return Outcome(
                task.id, task.lock_token, OutcomeKind.COMPLETED, result=result.result, claimed=task
            )
        kept = {"checkpoint": result.checkpoint, "checkpointed": result.checkpointed}
        if result.end is AttemptEnd.WAITING_TOOL and result.tool_call is not None:
            call = result.tool_call
            return Outcome(
                task.id,
                task.lock_token,
                OutcomeKind.WAITING_TOOL,
                claimed=task,
                tool_call={
                    "id": next_tool_call_id(len(task.tool_calls)),
                    "name": call.name,
                    "args": call.args,
                    "timeout_secs": call.timeout_secs or self.options.tool_timeout_secs,
                },
                **kept,
            )
        if result.end is AttemptEnd.PREEMPTED:
            return Outcome(
                task.id,
                task.lock_token,
                OutcomeKind.PREEMPTED,
                reason="preempted for more urgent work",
                claimed=task,
                **kept,
            )
        return Outcome(
            task.id,
            task.lock_token,
            OutcomeKind.FAILED,
            error=result.error or "failed",
            retryable=failure_is_retryable(result.retryable, result.end is AttemptEnd.TIMED_OUT),
            timed_out=result.end is AttemptEnd.TIMED_OUT,
            claimed=task,
            traceback=next((c.text for c in result.logs if c.stream == "traceback"), None),
            **kept,
        )

    # --- wake-ups -------------------------------------------------------------------------------

    def _heartbeat_interval(self) -> float:
        if self.options.heartbeat_secs is not None:
            return self.options.heartbeat_secs
        if not self.queue.store.push_notifications:
            return 0.5
        return max(0.5, self.queue.settings.queue.lease_ttl_secs / 3)

    def _deliveries_wake(self) -> None:
        if self.deliverer is not None:
            self.deliverer.wake.set()

    def _scheduler_wake(self) -> None:
        if self.scheduler is not None:
            self.scheduler.news()

    def _scheduler_look(self) -> None:
        """The claims ran dry. Under limits the planner's cases want an admission at once (an
        agent at its cap leaves tasks pending that its emptied executors can now take); without
        them nothing is pending but what the hints find due (delayed or retried tasks, released
        dependents), so the pass looks first and sends no admission when there is none."""
        if self.scheduler is None:
            return
        if self.queue.settings.admission_limited:
            self.scheduler.news()
        else:
            self.scheduler.look()

    def _work_arrived(self) -> None:
        self.claimer.work_arrived()
        self._wake.set()

    def _routed_work_arrived(self, agents: frozenset[str | None]) -> None:
        self.claimer.work_arrived(agents)
        self._wake.set()

    # --- shutdown -----------------------------------------------------------------------------

    async def _drain(self) -> None:
        if self._running:
            log.info(
                "stopping: waiting up to %.1fs for %d running task(s)", self._grace,
                len(self._running),
            )  # fmt: skip
        deadline = time.monotonic() + self._grace
        while self._running and time.monotonic() < deadline:
            jobs = [r.job for r in self._running.values() if r.job is not None]
            await asyncio.wait(jobs, timeout=max(0.0, deadline - time.monotonic()))
        for running in list(self._running.values()):
            running.control.stop(SHUTDOWN)
        jobs = [r.job for r in self._running.values() if r.job is not None]
        if jobs:
            await asyncio.wait(jobs)
