"""The worker: claims work up to its free slots, runs each task in its executor, keeps the leases
alive, reports outcomes in batches, and stops running attempts whose lease is revoked.

It waits for work by notification (LISTEN/NOTIFY on PostgreSQL; on SQLite, a cheap read of
``PRAGMA data_version``) with a slow poll as a safety net, never by a tight loop. Unless told not
to, it also runs a scheduler (see scheduler.loop), which competes for the leadership.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..domain.errors import AgentQueueError, ConfigError
from ..domain.models import LogRecord, Task
from ..domain.states import Refusal, TaskState
from ..executors.base import AttemptControl, AttemptEnd, AttemptResult, Executor
from ..executors.inprocess import is_async_callable
from ..scheduler.loop import Scheduler
from ..scheduler.steps import PERIODIC_STEPS
from ..service.execution import Outcome, OutcomeKind
from ..service.tools import ToolWork, take_tool_calls
from ..store.base import (
    CHANNEL_CHANGED,
    CHANNEL_PENDING,
    CHANNEL_QUEUED,
    CHANNEL_REVOKED,
    CHANNEL_TOOLS,
    CHANNELS,
    Notice,
)
from ..wakeups import follow, wait_event

if TYPE_CHECKING:
    from ..queue import AsyncQueue

log = logging.getLogger("agentqueue.worker")

SHUTDOWN = "the worker is shutting down"
PREEMPT_SETTLE_SECS = 0.2
"""How long a busy worker waits, on news of a queued P0 task, before preempting for it."""


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


@dataclass
class _Running:
    task: Task
    executor: Executor
    control: AttemptControl
    job: asyncio.Task[None] | None = None


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
        queue: AsyncQueue,
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
        self._running: dict[UUID, _Running] = {}
        self._outcomes: list[Outcome] = []
        self._logs: list[LogRecord] = []
        self._wake = asyncio.Event()
        self._flush = asyncio.Event()
        self._flushing: set[asyncio.Task[None]] = set()
        self._claiming: set[asyncio.Task[None]] = set()
        self._reserved: dict[str, int] = {e.name: 0 for e in executors}
        self._empty: set[str] = set()
        self._beat_now = asyncio.Event()
        self.scheduler: Scheduler | None = None
        self._tool_wake = asyncio.Event()
        self._tool_jobs: set[asyncio.Task[None]] = set()
        self._probe: asyncio.Task[None] | None = None
        self._preempting: asyncio.Task[None] | None = None
        self._probe_again = False
        self._stopping = False
        self._grace: float = options.grace_secs
        self._stopped = asyncio.Event()
        self.started = asyncio.Event()
        self.stats = {
            "claimed": 0,
            "completed": 0,
            "failed": 0,
            "released": 0,
            "revoked": 0,
            "waiting": 0,
            "preempted": 0,
            "tool_calls": 0,
        }

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

    def request_heartbeat(self, task_id: UUID) -> None:
        """Heartbeat soon (a handler asked to renew its lease)."""
        self._beat_now.set()

    # --- main loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Work until :meth:`stop` is called, then shut down gracefully."""
        store = self.queue.store
        await self.queue.open()
        background = [
            asyncio.create_task(self._listen(), name="agentqueue-listen"),
            asyncio.create_task(self._heartbeats(), name="agentqueue-heartbeat"),
            asyncio.create_task(self._flusher(), name="agentqueue-flush"),
        ]
        if self.tools:
            background.append(asyncio.create_task(self._tool_runner(), name="agentqueue-tools"))
        if self.options.run_scheduler:
            # The worker's listener wakes it; what it admits wakes the worker's claims.
            self.scheduler = Scheduler(
                await self.queue.runtime(),
                self.id,
                on_admitted=self._work_arrived,
                listen=False,
                min_gap_secs=self.options.scheduler_min_gap_secs,
                periodic=PERIODIC_STEPS,
            )
            background.append(asyncio.create_task(self.scheduler.run(), name="agentqueue-schedule"))
        log.info(
            "worker %s started on %s: %s",
            self.id,
            store.dialect,
            ", ".join(f"{e.name}({','.join(sorted(e.task_types))})" for e in self.executors),
        )
        self.started.set()
        try:
            while not self._stopping:
                self._fill()
                if not await wait_event(self._wake, self.options.poll_secs):
                    await self._poll()
                self._wake.clear()
            await self._drain()
        finally:
            if self._probe is not None:
                background.append(self._probe)
            if self._preempting is not None:
                background.append(self._preempting)
            background.extend(self._tool_jobs)
            for job in background:
                job.cancel()
            await asyncio.gather(*background, *self._claiming, return_exceptions=True)
            # No flush is started any more; finish those under way, then write what is left.
            await asyncio.gather(*self._flushing, return_exceptions=True)
            await self._flush_batches(attempts=10)
            for executor in self.executors:
                close = getattr(executor, "close", None)
                if close is not None:
                    close()
            self._stopped.set()
            log.info("worker %s stopped: %s", self.id, self.stats)

    def _fill(self) -> None:
        """Start claims for executors with free slots: batches of ``claim_batch``, at most
        ``claims_in_flight`` at once, so the database works on one while the worker handles
        another. An executor whose last claim came back short is left alone until new work
        is announced."""
        for executor in self.executors:
            while (
                len(self._claiming) < self.options.claims_in_flight
                and not self._stopping
                and executor.name not in self._empty
            ):
                reserved = sum(self._reserved.values())
                free_total = self.options.concurrency - len(self._running) - reserved
                busy = sum(1 for r in self._running.values() if r.executor is executor)
                free = min(
                    executor.max_concurrent - busy - self._reserved[executor.name],
                    free_total,
                    self.options.claim_batch,
                )
                if free <= 0:
                    break
                self._reserved[executor.name] += free
                job = asyncio.create_task(self._claim(executor, free))
                self._claiming.add(job)
                job.add_done_callback(self._claiming.discard)

    async def _claim(self, executor: Executor, n: int) -> None:
        try:
            tasks = await self.queue.claim(
                n, self.id, sorted(executor.task_types), sorted(executor.agents)
            )
        except AgentQueueError as exc:
            log.warning("claim failed, will retry: %s", exc)
            self._empty.add(executor.name)  # until the next poll
            return
        finally:
            self._reserved[executor.name] -= n
        self.stats["claimed"] += len(tasks)
        for task in tasks:
            self._start(task, executor)
        if len(tasks) < n:
            self._empty.add(executor.name)
            self._scheduler_wake()  # the queue ran dry here: admit what is pending
        self._wake.set()

    async def _poll(self) -> None:
        """The safety net behind notifications: if anything is queued, look again everywhere
        (one read; nothing is written while the queue is idle)."""
        if not self._empty:
            return
        try:
            hints = await self.queue.store.work_hints(self.queue.clock.now())
        except AgentQueueError:
            return
        if hints.queued:
            self._empty.clear()

    def _start(self, task: Task, executor: Executor) -> None:
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

        control = AttemptControl(
            deadline=time.monotonic() + deadline_in,
            timeout_secs=float(task.timeout_secs),
            cancel_grace_secs=self.options.cancel_grace_secs,
            yield_grace_secs=self.options.yield_grace_secs,
            save_checkpoint=save_checkpoint,
        )
        running = _Running(task, executor, control)
        self._running[task.id] = running
        running.job = asyncio.create_task(self._attempt(running), name=f"agentqueue-{task.id}")

    async def _attempt(self, running: _Running) -> None:
        task, control = running.task, running.control
        try:
            try:
                result = await running.executor.run(task, control)
            except Exception as exc:  # an executor bug must not take the worker down
                log.exception("executor %s failed on task %s", running.executor.name, task.id)
                result = AttemptResult(
                    AttemptEnd.FAILED, error=f"executor error: {type(exc).__name__}: {exc}"
                )
            outcome = self._outcome(task, control, result)
            if outcome is not None:
                self._outcomes.append(outcome)
            # Output belongs to the attempt, reported or not (a revoked attempt reports none).
            self._logs.extend(self._records(task, result))
            self._flush.set()
        finally:
            self._running.pop(task.id, None)
            self._wake.set()

    def _records(self, task: Task, result: AttemptResult) -> tuple[LogRecord, ...]:
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
                self.stats["released"] += 1
                return Outcome(
                    task.id, task.lock_token, OutcomeKind.RELEASED, reason=SHUTDOWN, claimed=task
                )
            self.stats["revoked"] += 1
            return None
        if result.end is AttemptEnd.COMPLETED:
            self.stats["completed"] += 1
            return Outcome(
                task.id, task.lock_token, OutcomeKind.COMPLETED, result=result.result, claimed=task
            )
        kept = {"checkpoint": result.checkpoint, "checkpointed": result.checkpointed}
        if result.end is AttemptEnd.WAITING_TOOL and result.tool_call is not None:
            self.stats["waiting"] += 1
            call = result.tool_call
            return Outcome(
                task.id,
                task.lock_token,
                OutcomeKind.WAITING_TOOL,
                claimed=task,
                # Call ids number the task's calls over its whole life: unique, and the same
                # on every worker.
                tool_call={
                    "id": f"call-{len(task.tool_calls) + 1}",
                    "name": call.name,
                    "args": call.args,
                    "timeout_secs": call.timeout_secs or self.options.tool_timeout_secs,
                },
                **kept,
            )
        if result.end is AttemptEnd.PREEMPTED:
            self.stats["preempted"] += 1
            return Outcome(
                task.id,
                task.lock_token,
                OutcomeKind.PREEMPTED,
                reason="preempted for more urgent work",
                claimed=task,
                **kept,
            )
        self.stats["failed"] += 1
        return Outcome(
            task.id,
            task.lock_token,
            OutcomeKind.FAILED,
            error=result.error or "failed",
            retryable=result.retryable or result.end is AttemptEnd.TIMED_OUT,
            claimed=task,
            **kept,
        )

    # --- outcomes -----------------------------------------------------------------------------

    async def _flusher(self) -> None:
        """Write outcomes as they come, in batches, with up to ``flushes_in_flight`` batches
        being written at once (group commit: what arrives during a write makes the next
        batch)."""
        while True:
            await self._flush.wait()
            self._flush.clear()
            while (self._outcomes or self._logs) and (
                len(self._flushing) < self.options.flushes_in_flight
            ):
                job = asyncio.create_task(self._flush_batches(max_batches=1))
                self._flushing.add(job)
                job.add_done_callback(self._flushed)

    def _flushed(self, job: asyncio.Task[None]) -> None:
        self._flushing.discard(job)
        if self._outcomes or self._logs:
            self._flush.set()

    async def _flush_batches(
        self, attempts: int | None = None, max_batches: int | None = None
    ) -> None:
        """Write the outcomes and logs gathered so far, one transaction per batch. If the store
        is unreachable, keep them and try again; ``attempts`` bounds that at shutdown."""
        tries = batches = 0
        while (self._outcomes or self._logs) and (max_batches is None or batches < max_batches):
            batch, self._outcomes = self._outcomes[:500], self._outcomes[500:]
            logs, self._logs = self._logs[:2000], self._logs[2000:]
            try:
                done = await self.queue.finish(batch, actor=self.id, logs=logs)
            except AgentQueueError as exc:
                self._outcomes[:0] = batch
                self._logs[:0] = logs
                tries += 1
                if self._stopping and attempts is None:
                    return  # the final flush at shutdown tries again, a bounded number of times
                if attempts is not None and tries >= attempts:
                    log.error(
                        "giving up on %d outcomes; their leases will lapse and the tasks will "
                        "be retried: %s", len(self._outcomes), exc,
                    )  # fmt: skip
                    return
                log.warning("could not record %d outcomes, will retry: %s", len(batch), exc)
                await asyncio.sleep(1.0)
                continue
            batches += 1
            for task_id, answer in done.items():
                if isinstance(answer, Refusal):
                    log.info("outcome for task %s not recorded: %s", task_id, answer.message)

    # --- leases -------------------------------------------------------------------------------

    def _heartbeat_interval(self) -> float:
        if self.options.heartbeat_secs is not None:
            return self.options.heartbeat_secs
        if not self.queue.store.push_notifications:
            return 0.5
        return max(0.5, self.queue.settings.queue.lease_ttl_secs / 3)

    async def _heartbeats(self) -> None:
        interval = self._heartbeat_interval()
        while True:
            await wait_event(self._beat_now, interval)
            self._beat_now.clear()
            held = [r.task for r in self._running.values() if not r.control.cancel.is_set()]
            if not held:
                continue
            try:
                reply = await self.queue.heartbeat(held)
            except AgentQueueError as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            for task_id, state in reply.lost.items():
                running = self._running.get(task_id)
                if running is None:
                    continue
                reason = (
                    "cancelled"
                    if state is TaskState.CANCELLED
                    else f"lease lost (the task is {state.value if state else 'gone'})"
                )
                log.info("stopping task %s: %s", task_id, reason)
                running.control.stop(reason)

    def _revoke(self, payload: str) -> None:
        for text in payload.split(","):
            try:
                task_id = UUID(text)
            except ValueError:
                continue
            running = self._running.get(task_id)
            if running is not None:
                log.info("stopping task %s: its lease was revoked", task_id)
                running.control.stop("lease revoked (cancelled or taken back)")

    # --- notifications ------------------------------------------------------------------------

    async def _listen(self) -> None:
        """Turn notices into wake-ups (the slow poll covers a dropped listener)."""
        await follow(self.queue.store, CHANNELS, self._on_notice, "worker")

    def _on_notice(self, notice: Notice) -> None:
        if notice.channel == CHANNEL_REVOKED:
            self._revoke(notice.payload)
            return
        if notice.channel in (CHANNEL_TOOLS, CHANNEL_CHANGED):
            self._tool_wake.set()
        if notice.channel == CHANNEL_TOOLS:
            return
        if notice.channel == CHANNEL_QUEUED and notice.payload == "p0":
            self._preempt_for_p0()
        if notice.channel != CHANNEL_QUEUED:
            self._scheduler_wake()
        if notice.channel == CHANNEL_CHANGED:
            # Some commit, maybe only a lease renewal: claim only if one read finds work queued.
            self._probe_again = True
            if self._probe is None or self._probe.done():
                self._probe = asyncio.create_task(self._probe_queued())
        elif notice.channel != CHANNEL_PENDING:
            self._work_arrived()

    async def _probe_queued(self) -> None:
        # A commit seen while a read is under way may be after its snapshot: read again.
        while self._probe_again:
            self._probe_again = False
            try:
                hints = await self.queue.store.work_hints(self.queue.clock.now())
            except AgentQueueError:
                return
            if hints.queued:
                self._work_arrived()
            if hints.p0_queued:
                self._preempt_for_p0()

    # --- tool runners ---------------------------------------------------------------------------

    async def _tool_runner(self) -> None:
        """Take awaited calls of this worker's tools, up to ``tool_concurrency`` at once, on
        every notice that tasks began waiting and at least every ``poll_secs``."""
        names = sorted(self.tools)
        while not self._stopping:
            room = self.options.tool_concurrency - len(self._tool_jobs)
            if room > 0:
                try:
                    work = await take_tool_calls(
                        await self.queue.runtime(),
                        names,
                        self.id,
                        room,
                        self.options.tool_lease_secs,
                    )
                except AgentQueueError as exc:
                    log.warning("taking tool calls failed: %s", exc)
                    work = []
                for item in work:
                    job = asyncio.create_task(self._run_tool(item))
                    self._tool_jobs.add(job)
                    job.add_done_callback(self._tool_done)
                if len(work) == room:
                    continue  # there may be more
            await wait_event(self._tool_wake, self.options.poll_secs)
            self._tool_wake.clear()

    def _tool_done(self, job: asyncio.Task[None]) -> None:
        self._tool_jobs.discard(job)
        self._tool_wake.set()

    async def _run_tool(self, work: ToolWork) -> None:
        fn = self.tools[work.name]
        self.stats["tool_calls"] += 1
        try:
            if is_async_callable(fn):
                value = await fn(work.args)
            else:
                value = await asyncio.get_running_loop().run_in_executor(None, fn, work.args)
        except Exception as exc:  # the tool's failure is the call's answer
            value = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        try:
            await self.queue.submit_tool_result(work.task_id, work.call_id, value, actor=self.id)
        except AgentQueueError as exc:  # not awaited any more (timed out, cancelled)
            log.info("result of tool call %s of task %s not taken: %s", work.call_id,
                     work.task_id, exc)  # fmt: skip

    # --- preemption ----------------------------------------------------------------------------

    def _preempt_for_p0(self) -> None:
        """A P0 task is queued: if every slot of an executor is busy, ask its longest-running
        task of low enough priority that has run long enough to yield (R11). A moment's wait
        first: if a worker with a free slot claims the P0 task meanwhile, nothing is
        preempted (several busy workers hear of the same task)."""
        if not self.options.preempt or self._victims() == []:
            return
        if self._preempting is None or self._preempting.done():
            self._preempting = asyncio.create_task(self._preempt_if_still_queued())

    async def _preempt_if_still_queued(self) -> None:
        await asyncio.sleep(PREEMPT_SETTLE_SECS)
        try:
            wanted = await self.queue.store.queued_p0()
        except AgentQueueError:
            return
        if wanted:
            for victim in self._victims(wanted):
                log.info("asking task %s (P%d) to yield its slot to a P0 task", victim.task.id,
                         victim.task.priority)  # fmt: skip
                victim.control.request_yield()

    def _victims(self, wanted: Sequence[tuple[str | None, str]] | None = None) -> list[_Running]:
        """For each executor with every slot busy and none yielding yet (and, given the queued
        P0 tasks' (agent, task_type), only executors that could run one of them): its task to
        preempt, if one is of low enough priority and has run long enough."""
        victims = []
        now = self.queue.clock.now()
        for executor in self.executors:
            if wanted is not None and not any(
                agent in executor.agents if agent is not None else task_type in executor.task_types
                for agent, task_type in wanted
            ):
                continue
            mine = [r for r in self._running.values() if r.executor is executor]
            if len(mine) < executor.max_concurrent or any(r.control.yielding.is_set()
                                                          for r in mine):  # fmt: skip
                continue
            candidates = [
                r
                for r in mine
                if r.task.priority >= self.options.preempt_min_priority
                and r.task.started_at is not None
                and (now - r.task.started_at).total_seconds() > self.options.preempt_after_secs
            ]
            if candidates:
                victims.append(min(candidates, key=lambda r: (-r.task.priority, r.task.started_at)))
        return victims

    def _scheduler_wake(self) -> None:
        if self.scheduler is not None:
            self.scheduler.wake.set()

    def _work_arrived(self) -> None:
        self._empty.clear()
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
