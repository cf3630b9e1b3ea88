"""The public Python entry point: ``AsyncQueue`` (async) and ``Queue`` (its sync facade).

Like psycopg's pair of connection classes, both have the same method names; ``Queue`` runs the
async implementation on a private event-loop thread, so there is one copy of every operation.

    import agentqueue
    q = agentqueue.Queue("sqlite:///agentqueue.db")
    q.submit(title="Fix the login bug", task_type="bugfix", priority="P1")
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Self, TypeVar
from uuid import UUID

from .clock import Clock, SystemClock
from .domain.access import in_scope
from .domain.audit import Keyring, install_keys
from .domain.errors import InvalidInput
from .domain.models import Task
from .domain.states import Action, Refusal, TaskState
from .ids import parse_task_id
from .lazy import LazyModule
from .service import reads
from .service.runtime import Runtime
from .store import DEFAULT_URL, describe_url, make_store
from .store.base import Lease
from .supervise import Supervisor, until_reachable
from .unconfigured import default_db

if TYPE_CHECKING:
    from .config import Settings
    from .domain.access import TokenRecord
    from .domain.audit import Anchor
    from .domain.deliveries import DeliveryRecord
    from .domain.models import Event, LogRecord
    from .domain.schedule import Schedule
    from .domain.waiting import Reason, Scope, Survey
    from .executors.inprocess import Handler
    from .service import actions, approvals, audit, execution, pausing, submit, threads, tokens
    from .service import deliveries as deliveries_service
    from .service import tools as tools_service
    from .service import waiting as waiting_service
    from .service.audit import VerifyReport
    from .service.execution import HeartbeatReply, Outcome
    from .service.reads import Stats, TaskPage
    from .service.submit import SubmitResult
    from .spec import TaskSpec
    from .store import Store
    from .store.base import LeaderInfo, PausedType
else:
    # The operations a command may not call are loaded when first called (start-up time:
    # ``agentqueue list`` needs only the reads).
    actions = LazyModule("agentqueue.service.actions")
    approvals = LazyModule("agentqueue.service.approvals")
    audit = LazyModule("agentqueue.service.audit")
    execution = LazyModule("agentqueue.service.execution")
    pausing = LazyModule("agentqueue.service.pausing")
    submit = LazyModule("agentqueue.service.submit")
    threads = LazyModule("agentqueue.service.threads")
    tokens = LazyModule("agentqueue.service.tokens")
    deliveries_service = LazyModule("agentqueue.service.deliveries")
    tools_service = LazyModule("agentqueue.service.tools")
    waiting_service = LazyModule("agentqueue.service.waiting")

if TYPE_CHECKING:
    # Loaded by the methods that use them: a one-shot command (``agentqueue list``) reads the
    # database without paying for the scheduler, the worker and the outbox's HTTP senders.
    from .scheduler.loop import Scheduler
    from .scheduler.steps import TickReport
    from .worker.runner import Worker

log = logging.getLogger("agentqueue.scheduler")

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H", bound=Callable[..., Any])
ToolFn = Callable[[Any], Any]
T_Tool = TypeVar("T_Tool", bound=Callable[..., Any])

LeaseLike = Lease | Task | tuple[UUID | str, UUID | str]


_Self = TypeVar("_Self")


def _acting(
    act: Callable[Concatenate[_Self, Action, P], Awaitable[R]], action: Action, doc: str
) -> Callable[Concatenate[_Self, P], Awaitable[R]]:
    """The method named after ``action`` that calls ``act`` with it: people's actions differ
    only in the action they take, so their signature and path are written once, in ``act``."""

    async def method(queue: _Self, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await act(queue, action, *args, **kwargs)

    method.__name__ = action.value
    method.__qualname__ = f"{act.__qualname__.rpartition('.')[0]}.{action.value}"
    method.__doc__ = doc
    # help() and editors show the signature ``act`` gives, without the bound action.
    signature = inspect.signature(act)
    queue_param, _action, *params = signature.parameters.values()
    method.__signature__ = signature.replace(parameters=[queue_param, *params])  # type: ignore[attr-defined]
    return method


def _lease(item: LeaseLike) -> Lease:
    if isinstance(item, Lease):
        return item
    if isinstance(item, Task):
        if item.lock_token is None:
            raise InvalidInput(f"task {item.id} holds no lease", "lock_token")
        return Lease(item.id, item.lock_token)
    task_id, token = item
    return Lease(parse_task_id(task_id), parse_task_id(token, "lock_token"))


def _unconfigured_settings(db: str | None) -> Settings:
    from .config import unconfigured_settings

    return unconfigured_settings(db)


class AsyncQueue:
    """A queue on one database, for asyncio code.

    ``url`` is ``sqlite:///path.db`` or ``postgresql://...``; without it, ``AGENTQUEUE_DB``, then
    ``db`` in the configuration, then ``sqlite:///agentqueue.db``. ``tenant`` scopes every read
    and write to one tenant; without it the queue acts for all tenants (as an operator does).
    The schema is migrated on first use. ``open_wait_secs`` bounds how long opening waits for
    a database server that cannot be reached (default: the store's, 15 s for PostgreSQL).
    ``sqlite_writer`` is where a SQLite database's writer connection lives unless its URL's
    ``?writer=`` says: ``thread`` (default), ``process``, or ``auto`` (a process while busy, a
    thread while quiet: what the long-running commands choose; README, Storage).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        tenant: str | None = None,
        settings: Settings | None = None,
        config: str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        actor: str = "api",
        open_wait_secs: float | None = None,
        sqlite_writer: str | None = None,
    ) -> None:
        given: Settings | Callable[[], Settings] | None = settings
        db = settings.db if settings is not None else None
        if given is None:
            path = config or os.environ.get("AGENTQUEUE_CONFIG") or None
            unconfigured, db = default_db(os.environ) if path is None else (False, None)
            if unconfigured:
                # The defaults, built when first read: a command that reads none of them (list)
                # loads neither the configuration's models nor pydantic (start-up time).
                given = functools.partial(_unconfigured_settings, db)
            else:
                from .config import load_settings

                given = settings = load_settings(path)
                db = settings.db
        self.url = url or db or DEFAULT_URL
        # The audit keys of this process (R24), before the store: its connections carry them.
        # The defaults name none.
        install_keys(settings.audit.keyring() if settings is not None else Keyring())
        self.tenant = tenant
        self.actor = actor
        self._rt = Runtime(
            store=store or make_store(self.url, sqlite_writer=sqlite_writer),
            settings=given,
            clock=clock or SystemClock(),
        )
        if settings is not None:
            # A bad [pipelines] or [[guardrails]] fails here, at once (the defaults have none).
            self._rt.pipelines  # noqa: B018
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._open_wait_secs = open_wait_secs
        self.handlers: dict[str, Handler] = {}
        self.tools: dict[str, ToolFn] = {}

    @property
    def settings(self) -> Settings:
        """The settings in force."""
        return self._rt.settings

    @property
    def clock(self) -> Clock:
        """The clock in use."""
        return self._rt.clock

    @property
    def store(self) -> Store:
        """The underlying store (for tools and tests)."""
        return self._rt.store

    async def _ready(self) -> Runtime:
        if not self._opened:
            if self._open_lock is None:
                self._open_lock = asyncio.Lock()
            async with self._open_lock:
                if not self._opened:
                    await self._rt.store.open(wait_secs=self._open_wait_secs)
                    self._opened = True
        return self._rt

    async def runtime(self) -> Runtime:
        """The store (opened), settings and clock every service function works with."""
        return await self._ready()

    async def open(self) -> None:
        """Connect and migrate now rather than on first use."""
        await self._ready()

    async def close(self) -> None:
        """Release the database connections."""
        if self._opened:
            self._opened = False
        await self._rt.store.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def migrate(self) -> list[int]:
        """Apply missing schema migrations; return the versions applied."""
        if not self._opened:
            await self._rt.store.open(migrate=False, wait_secs=self._open_wait_secs)
            self._opened = True
        return await self._rt.store.migrate()

    # --- submitting -------------------------------------------------------------------------

    async def submit(
        self, spec: TaskSpec | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> SubmitResult:
        """Submit one task, from a TaskSpec, a dict, or keyword fields (SPEC section 1 names).

        Returns the new task with ``created=True``, or, when a live task has the same
        (tenant, source, source_id) or a task has the same idempotency_key, that task with
        ``created=False``. Raises InvalidInput naming the bad field; nothing is written then.
        """
        if spec is not None and fields:
            raise InvalidInput("give a spec or keyword fields, not both", "spec")
        item: TaskSpec | Mapping[str, Any] = spec if spec is not None else fields
        results = await submit.submit_many(
            await self._ready(), [item], tenant=self.tenant, defaults=self._defaults(), single=True
        )
        return results[0]

    async def submit_many(
        self,
        specs: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> list[SubmitResult]:
        """Submit many tasks in bulk (one statement per 1,000); results in input order.

        All are validated first: one bad item fails the call, naming ``tasks[i].field``, and
        nothing is written. ``progress`` is told how many were stored after each 1,000.
        """
        return await submit.submit_many(
            await self._ready(),
            specs,
            tenant=self.tenant,
            defaults=self._defaults(),
            progress=progress,
        )

    def _defaults(self) -> dict[str, Any]:
        return {"requested_by": self.actor}

    # --- reading ----------------------------------------------------------------------------

    async def get(self, task_id: UUID | str) -> Task:
        """One task by id; NotFound if there is none (in this queue's tenant)."""
        return await reads.get(await self._ready(), parse_task_id(task_id), self.tenant)

    async def waiting(self, task_id: UUID | str) -> tuple[Task, list[Reason]]:
        """One task and why it waits (no reasons unless it is pending, blocked, queued,
        retrying, waiting on a tool or executing); NotFound if there is none."""
        rt = await self._ready()
        task = await reads.get(rt, parse_task_id(task_id), self.tenant)
        return task, await waiting_service.why(rt, task)

    async def left_for(self, scope: Scope) -> Survey | None:
        """What is left for the process ``scope`` describes (``--until-idle``): None while a
        task it still waits for exists, else the tasks left with their reasons."""
        return await waiting_service.left_for(await self._ready(), scope)

    async def events(self, task_id: UUID | str) -> list[Event]:
        """The audit events of one task, oldest first."""
        return await reads.events(await self._ready(), parse_task_id(task_id), self.tenant)

    async def prompt(self, task_id: UUID | str) -> str | None:
        """The prompt a command agent is given for the task (its template rendered with the
        task as it is now); None when no ``[prompts]`` template applies to it."""
        return await reads.prompt(await self._ready(), parse_task_id(task_id), self.tenant)

    async def thread(self, task_id: UUID | str) -> list[Task]:
        """The thread a task is in (a mail and its replies): its first task, then the replies,
        oldest first at each level; NotFound if there is no such task."""
        return await threads.thread(await self._ready(), parse_task_id(task_id), self.tenant)

    async def stats(self) -> Stats:
        """Task counts by state."""
        return await reads.stats(await self._ready(), self.tenant)

    async def agents(self) -> list[reads.AgentLoad]:
        """The configured agents with their capabilities, caps and admitted work (all tenants:
        a cap counts every tenant's work)."""
        return await reads.agent_loads(await self._ready())

    async def work_left(self) -> int:
        """Tasks the queue will still move by itself (pending, queued, executing, retrying),
        not counting pending ones no agent can take."""
        return await reads.work_left(await self._ready(), self.tenant)

    async def dead_letters(self, *, limit: int = 50, cursor: str | None = None) -> TaskPage:
        """Tasks in dead_letter or manual_review, newest first."""
        return await self.list(
            state=[TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW], limit=limit, cursor=cursor
        )

    # --- people's actions -------------------------------------------------------------------

    async def _act(
        self,
        action: Action,
        task_id: UUID | str,
        *,
        actor: str | None = None,
        reason: str = "",
    ) -> Task:
        return await self._act_on(action, task_id, actor, reason)

    async def _act_on(
        self,
        action: Action,
        task_id: UUID | str,
        actor: str | None,
        reason: str,
        assignee: str | None = None,
    ) -> Task:
        done = await actions.act(
            await self._ready(),
            action,
            [parse_task_id(task_id)],
            actor=actor or self.actor,
            reason=reason,
            tenant=self.tenant,
            assignee=assignee,
        )
        return done[0]

    cancel = _acting(
        _act,
        Action.CANCEL,
        "Cancel a task that has not ended; an executing one loses its lease at once.",
    )
    review = _acting(_act, Action.REVIEW, "Take a dead letter into manual_review.")
    archive = _acting(_act, Action.ARCHIVE, "Discard a dead letter (or a task in review) for good.")

    async def requeue(
        self,
        task_id: UUID | str,
        *,
        actor: str | None = None,
        reason: str = "",
        assignee: str | None = None,
    ) -> Task:
        """Put a dead letter (or a task in review) back in the queue with retry_count reset.

        ``assignee`` hands it to a new assignee in the same change (the requeue event records
        it): the task is routed afresh for it, as admission would route it, in place of the
        agent it had. InvalidInput naming ``assignee`` for a bad name, or when no agent can
        take the task.
        """
        return await self._act_on(Action.REQUEUE, task_id, actor, reason, assignee)

    async def _decide(
        self, approve: bool, task_id: UUID | str, actor: str | None, reason: str
    ) -> Task:
        return await approvals.decide_approval(
            await self._ready(),
            parse_task_id(task_id),
            approve=approve,
            actor=actor or self.actor,
            reason=reason,
            tenant=self.tenant,
        )

    async def approve(self, task_id: UUID | str, *, actor: str | None = None, reason: str) -> Task:
        """Release a task a guardrail holds for approval (to pending); only an approver may
        (Forbidden otherwise). Audited with who and why."""
        return await self._decide(True, task_id, actor, reason)

    async def reject(self, task_id: UUID | str, *, actor: str | None = None, reason: str) -> Task:
        """Cancel a task a guardrail holds for approval; only an approver may (Forbidden
        otherwise). Audited with who and why."""
        return await self._decide(False, task_id, actor, reason)

    # --- executors --------------------------------------------------------------------------

    async def claim(
        self,
        n: int,
        worker: str,
        task_types: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
    ) -> list[Task]:
        """Claim up to ``n`` queued tasks for ``worker``; each comes with a fresh lock_token.
        ``agents``: the agents the claimer runs (a task routed to an agent goes only to it)."""
        return await execution.claim(await self._ready(), n, worker, task_types, agents)

    async def heartbeat(self, leases: Iterable[LeaseLike]) -> HeartbeatReply:
        """Extend leases (Tasks, Leases or (id, lock_token) pairs); report the lost ones."""
        return await execution.heartbeat(await self._ready(), [_lease(x) for x in leases])

    async def finish(
        self,
        outcomes: Sequence[Outcome],
        *,
        actor: str | None = None,
        logs: Sequence[LogRecord] = (),
    ) -> dict[UUID, Task | Refusal]:
        """Record many attempt outcomes (and attempts' captured output) in one transaction;
        refusals are returned, not raised."""
        return await execution.finish(await self._ready(), outcomes, actor or self.actor, logs)

    async def complete(
        self, task_id: UUID | str, lock_token: UUID | str, result: Any = None
    ) -> Task:
        """Mark a claimed task completed; LeaseLost if ``lock_token`` no longer holds it."""
        lease = _lease((task_id, lock_token))
        outcome = execution.Outcome(
            lease.task_id, lease.lock_token, execution.OutcomeKind.COMPLETED, result=result
        )
        return await execution.finish_one(await self._ready(), outcome, self.actor)

    async def fail(
        self,
        task_id: UUID | str,
        lock_token: UUID | str,
        error: str,
        *,
        retryable: bool = True,
    ) -> Task:
        """Record a failed attempt: retrying (with backoff) or dead_letter when retryable,
        failed when not. LeaseLost if ``lock_token`` no longer holds the task."""
        lease = _lease((task_id, lock_token))
        outcome = execution.Outcome(
            lease.task_id,
            lease.lock_token,
            execution.OutcomeKind.FAILED,
            error=error,
            retryable=retryable,
        )
        return await execution.finish_one(await self._ready(), outcome, self.actor)

    async def release(self, task_id: UUID | str, lock_token: UUID | str, reason: str = "") -> Task:
        """Give a claimed task back to the queue without counting a retry."""
        lease = _lease((task_id, lock_token))
        outcome = execution.Outcome(
            lease.task_id, lease.lock_token, execution.OutcomeKind.RELEASED, reason=reason
        )
        return await execution.finish_one(await self._ready(), outcome, self.actor)

    # --- scheduler steps --------------------------------------------------------------------

    async def admit(self, limit: int = 1000) -> list[Task]:
        """Admit pending tasks to the queue, best first; return them in that order."""
        from .scheduler import steps as maintenance

        ids = await maintenance.admit(await self._ready(), limit)
        found = {t.id: t for t in await self._rt.store.get_tasks(ids)}
        return [found[i] for i in ids if i in found]

    async def admit_ids(self, limit: int | None = None) -> list[UUID]:
        """Like :meth:`admit`, returning only the ids (what the scheduler loop needs); at most
        ``limit`` (default: the scheduler's batch)."""
        from .scheduler import steps as maintenance

        batch = maintenance.ADMIT_BATCH if limit is None else limit
        return await maintenance.admit(await self._ready(), batch)

    async def reclaim_lapsed(self, limit: int = 500) -> list[Task]:
        """Take back executing tasks whose lease lapsed or whose attempt timed out."""
        from .scheduler import steps as maintenance

        return await maintenance.reclaim_lapsed(await self._ready(), limit)

    async def promote_due_retries(self, limit: int = 500) -> list[Task]:
        """Move retrying tasks whose backoff elapsed back to pending."""
        from .scheduler import steps as maintenance

        return await maintenance.promote_due_retries(await self._ready(), limit)

    async def tick(self) -> TickReport:
        """One scheduler pass: reclaim, promote retries, admit."""
        from .scheduler import steps as maintenance

        return await maintenance.tick(await self._ready())

    async def deliver_alerts(self, limit: int = 50) -> int:
        """Send due dead-letter alerts (R8) to the configured webhook; return how many were
        delivered. Failed ones are tried again later, with backoff, until delivered."""
        from .delivery.alerts import deliver_due_alerts

        return await deliver_due_alerts(await self._ready(), limit=limit)

    async def purge_dead_letters(self, limit: int = 500) -> int:
        """Purge dead letters kept past their retention (R8); return how many. Their audit
        events stay, ending with the purge."""
        from .scheduler.retention import purge_expired_dead_letters

        return await purge_expired_dead_letters(await self._ready(), limit)

    def scheduler(self, *, holder: str | None = None, listen: bool = True) -> Scheduler:
        """A scheduler on this queue (run it with ``await scheduler.run()``): it competes for
        the leadership and, while it leads, runs every step (see agentqueue.scheduler)."""
        if not self._opened:
            raise RuntimeError("open the queue before making a scheduler")
        from .scheduler.loop import Scheduler
        from .scheduler.steps import PERIODIC_STEPS
        from .worker.runner import default_worker_id

        return Scheduler(
            self._rt, holder or default_worker_id(), listen=listen, periodic=PERIODIC_STEPS
        )

    async def run_scheduler(self, *, holder: str | None = None, deliver: bool = True) -> None:
        """Run a scheduler until cancelled, and beside it (unless ``deliver`` is False) a
        deliverer of the outbox. A database away at start is waited for (saying so once); one
        that cannot be used (StoreMisconfigured) raises at once."""
        rt = await until_reachable(self._ready, log, "opening the database")
        jobs = Supervisor(log)
        jobs.start(self.scheduler(holder=holder).run(), "agentqueue-scheduler")
        if deliver:
            from .delivery import deliverer

            sender = deliverer(rt)
            jobs.start(sender.listen(), "agentqueue-deliver-listen")
            jobs.start(sender.run(), "agentqueue-deliver")
        try:
            await jobs.failed.wait()
        finally:
            await jobs.close()
        jobs.check()

    async def deliver(self, kinds: Sequence[str] | None = None) -> int:
        """One round of the outbox's deliverer: send what is due now, once, of every kind (of
        ``kinds``, if given) whose destination is configured; return how many were delivered."""
        from .delivery import deliverer

        delivered, _more = await deliverer(await self._ready()).deliver_due(kinds)
        return delivered

    async def leader(self) -> LeaderInfo | None:
        """Who holds (or last held) the scheduler leadership."""
        from .service.records import LEADERSHIP

        return await (await self._ready()).store.leader(LEADERSHIP)

    async def pause(
        self, task_type: str, *, actor: str | None = None, reason: str = ""
    ) -> PausedType:
        """Stop admitting and claiming tasks of ``task_type`` (an incident switch)."""
        return await pausing.pause(
            await self._ready(), task_type, actor=actor or self.actor, reason=reason
        )

    async def resume(self, task_type: str, *, actor: str | None = None) -> bool:
        """Undo :meth:`pause`; False if the type was not paused."""
        return await pausing.resume(await self._ready(), task_type, actor=actor or self.actor)

    async def paused(self) -> list[PausedType]:
        """Every paused task type."""
        return await pausing.paused(await self._ready())

    async def logs(self, task_id: UUID | str) -> list[LogRecord]:
        """Captured output of a task's attempts (agent stdout/stderr, handler log lines)."""
        task = await self.get(task_id)
        return await self._rt.store.logs(task.id, self.tenant)

    # --- workers ----------------------------------------------------------------------------

    def tool(self, name: str) -> Callable[[T_Tool], T_Tool]:
        """Register the decorated function as the runner of tool ``name``: workers call it
        (``fn(args)``, async or not) for every call of that tool a waiting task makes, apart
        from their task slots, and record what it returns as the call's result (an exception
        becomes ``{"error": "..."}``)."""
        from .spec import check_name

        try:
            check_name(name, "tool")
        except ValueError as exc:
            raise InvalidInput(str(exc), "name") from None

        def register(fn: T_Tool) -> T_Tool:
            self.tools[name] = fn
            return fn

        return register

    async def submit_tool_result(
        self, task_id: UUID | str, call_id: str, result: Any, *, actor: str | None = None
    ) -> Task:
        """Answer a waiting task's tool call; the task is queued again and resumes from its
        checkpoint. Refused (TransitionRefused) for a call that is not awaited any more."""
        return await tools_service.submit_tool_result(
            await self._ready(),
            parse_task_id(task_id),
            call_id,
            result,
            actor=actor or self.actor,
            tenant=self.tenant,
        )

    def handler(self, task_type: str) -> Callable[[H], H]:
        """Register the decorated function as the handler of ``task_type``.

        ``async def`` handlers run on the worker's event loop, plain functions in a thread
        pool. Either takes ``(task, ctx)``; see :class:`agentqueue.TaskContext`.
        """
        if not task_type or not isinstance(task_type, str):
            raise InvalidInput("must name a task type", "task_type")

        def register(fn: H) -> H:
            if task_type in self.handlers and self.handlers[task_type] is not fn:
                raise InvalidInput(
                    f"a handler for {task_type!r} is already registered", "task_type"
                )
            self.handlers[task_type] = fn
            return fn

        return register

    def worker(
        self,
        *,
        concurrency: int | None = None,
        task_types: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        worker_id: str | None = None,
        run_scheduler: bool = True,
        grace_secs: float | None = None,
        deliver_before_exit: bool = False,
        origin: str = "",
    ) -> Worker:
        """A worker for this queue's handlers and configured agents (see ``run_worker``).
        ``deliver_before_exit``: once stopped, try each delivery due then once before
        returning (``--until-idle``). ``origin``: where the database and settings came
        from, said in the start line."""
        from .worker.assemble import build_executors, derived_slots
        from .worker.runner import Worker, WorkerOptions, default_worker_id
        from .worker.tuning import tune

        conf = self.settings.worker
        handler_part, agent_part = derived_slots(self.settings, self.handlers, task_types, agents)
        tuning = tune(
            self.store.dialect,
            slots=handler_part + agent_part,
            concurrency=concurrency or conf.concurrency,
            claim_batch=self.settings.queue.claim_batch,
            claims_in_flight=conf.claims_in_flight,
            flushes_in_flight=conf.flushes_in_flight,
            separate_writer=self.store.separate_writer,
        )
        options = WorkerOptions(
            worker_id=worker_id or default_worker_id(),
            concurrency=tuning.concurrency,
            run_scheduler=run_scheduler,
            grace_secs=conf.grace_secs if grace_secs is None else grace_secs,
            heartbeat_secs=conf.heartbeat_secs,
            poll_secs=conf.poll_secs,
            cancel_grace_secs=conf.cancel_grace_secs,
            claim_batch=tuning.claim_batch,
            claims_in_flight=tuning.claims_in_flight,
            flushes_in_flight=tuning.flushes_in_flight,
            tuning=tuning.describe(),
            lease_guard=conf.lease_guard,
            tool_timeout_secs=self.settings.tools.timeout_secs,
            tool_concurrency=self.settings.tools.concurrency,
            tool_lease_secs=self.settings.tools.lease_secs,
            yield_grace_secs=self.settings.preemption.grace_secs,
            preempt=self.settings.preemption.enabled,
            preempt_after_secs=self.settings.preemption.after_secs,
            preempt_min_priority=self.settings.preemption.min_priority,
            deliver_before_exit=deliver_before_exit,
            database=describe_url(self.url),
            origin=origin,
        )
        holder: list[Worker] = []
        executors = build_executors(
            self.settings,
            self.handlers,
            concurrency=options.concurrency,
            # Derived slots: the handlers keep to their share, the agents' stay theirs.
            handler_slots=handler_part if "concurrency" in tuning.derived else None,
            task_types=task_types,
            agents=agents,
            request_heartbeat=lambda task_id: holder[0].request_heartbeat(task_id),
            database_url=self.url,
        )
        holder.append(Worker(self, executors, options, tools=dict(self.tools)))
        return holder[0]

    async def run_worker(
        self,
        *,
        concurrency: int | None = None,
        task_types: Sequence[str] | None = None,
        agents: Sequence[str] | None = None,
        worker_id: str | None = None,
        run_scheduler: bool = True,
        grace_secs: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Run a worker until ``stop`` is set (or the task running this is cancelled), then stop
        gracefully: running tasks get the grace period, the rest go back to the queue."""
        worker = self.worker(
            concurrency=concurrency,
            task_types=task_types,
            agents=agents,
            worker_id=worker_id,
            run_scheduler=run_scheduler,
            grace_secs=grace_secs,
        )

        async def watch() -> None:
            if stop is not None:
                await stop.wait()
                worker.stop()

        watcher = asyncio.create_task(watch())
        runner = asyncio.create_task(worker.run())
        try:
            await asyncio.shield(runner)
        except asyncio.CancelledError:
            worker.stop()
            await runner
            raise
        finally:
            watcher.cancel()

    # --- audit ------------------------------------------------------------------------------

    async def verify(self, *, progress: Callable[[int], None] | None = None) -> VerifyReport:
        """Check every task's audit chain; the report names the first bad event. ``progress``
        is told of each task checked."""
        return await audit.verify(await self._ready(), progress=progress)

    async def anchor_audit(self) -> list[Anchor]:
        """Sign an anchor over the events of the global sequence not yet anchored, in the
        database, the ``[audit] anchor_file`` and the log (R24); the anchors made."""
        return await audit.anchor(await self._ready())

    # --- API tokens (R20) -------------------------------------------------------------------

    async def create_token(
        self, name: str, *, role: str, tenant: str | None = None, expires: str | None = None
    ) -> tokens.NewToken:
        """Make an API token called ``name`` with ``role`` (submitter, approver, operator,
        admin or worker), bound to ``tenant`` (the default tenant if None; an admin token
        covers every tenant and takes none), expiring after ``expires`` (``90d``, ``12h``...;
        None: never). The secret is in the result and nowhere else."""
        return await tokens.create_token(
            await self._ready(), name=name, role=role, tenant=tenant, expires=expires,
            actor=self.actor,
        )  # fmt: skip

    async def tokens(self) -> list[TokenRecord]:
        """Every API token (revoked and expired ones too), without secrets."""
        return await tokens.list_tokens(await self._ready())

    async def revoke_token(self, name: str) -> TokenRecord:
        """Revoke the token called ``name``; NotFound if there is no live one."""
        return await tokens.revoke_token(await self._ready(), name)

    # --- cron schedules ---------------------------------------------------------------------

    async def add_schedule(
        self,
        name: str,
        *,
        cron: str,
        task: TaskSpec | Mapping[str, Any],
        tz: str = "UTC",
        catch_up: str = "skip",
        tenant: str | None = None,
    ) -> Schedule:
        """Submit ``task`` (task fields, as for ``submit``) at every slot of the cron expression
        ``cron`` in time zone ``tz``, e.g. ``add_schedule("nightly", cron="0 2 * * *",
        tz="Europe/Berlin", task={"title": "Dependency audit", "task_type": "review"})``.

        ``catch_up`` says what happens to slots missed while no scheduler ran: ``skip`` (only a
        slot at most a minute late fires) or ``once`` (the latest missed slot fires once).
        Raises InvalidInput naming each bad field (``cron``, ``tz``, ``task.title``...);
        nothing is written then.
        """
        from .service import schedules as cron_schedules
        from .spec import TaskSpec

        template = (
            task.model_dump(mode="json", exclude_unset=True) if isinstance(task, TaskSpec) else task
        )

        return await cron_schedules.add_schedule(
            await self._ready(),
            name,
            cron=cron,
            task=template,
            tz=tz,
            catch_up=catch_up,
            tenant=in_scope(self.tenant, tenant),
            actor=self.actor,
        )

    async def schedules(self, *, tenant: str | None = None) -> list[Schedule]:
        """The cron schedules (of this queue's tenant, else of ``tenant``, else of all)."""
        from .service import schedules as cron_schedules

        return await cron_schedules.list_schedules(
            await self._ready(), in_scope(self.tenant, tenant)
        )

    async def remove_schedule(self, name: str, *, tenant: str | None = None) -> Schedule:
        """Remove a cron schedule and return it; NotFound if there is none by that name.
        Tasks it already submitted are left as they are."""
        from .service import schedules as cron_schedules

        return await cron_schedules.remove_schedule(
            await self._ready(), in_scope(self.tenant, tenant), name
        )

    async def fire_schedules(self) -> int:
        """Submit the tasks of every due cron slot (a scheduler step); return how many were
        created. Any number of schedulers may run it at once: each slot fires once."""
        from .service import schedules as cron_schedules

        return await cron_schedules.fire_due_schedules(await self._ready())

    # --- deliveries --------------------------------------------------------------------------

    async def deliveries(
        self,
        *,
        kind: str | None = None,
        state: str | None = None,
        task_id: UUID | str | None = None,
        limit: int = 50,
    ) -> list[DeliveryRecord]:
        """Deliveries (callbacks, replies on GitHub, alerts) of this queue's tenant, newest
        first: of ``kind``, in ``state`` (pending, delivered, given_up), about ``task_id``."""
        return await deliveries_service.list_deliveries(
            await self._ready(),
            tenant=self.tenant,
            kind=kind,
            state=state,
            task_id=None if task_id is None else parse_task_id(task_id),
            limit=limit,
        )

    async def delivery(self, delivery_id: int) -> DeliveryRecord:
        """One delivery with every try; NotFound if there is none."""
        return await deliveries_service.get_delivery(await self._ready(), delivery_id, self.tenant)

    async def retry_delivery(self, delivery_id: int) -> DeliveryRecord:
        """Make a pending or given-up delivery due now (its tries kept); Conflict if it was
        delivered or is being sent right now."""
        return await deliveries_service.retry_delivery(
            await self._ready(), delivery_id, self.tenant
        )

    # Last, so that ``list`` in the annotations above still means the builtin.
    async def list(
        self,
        *,
        state: TaskState | str | Iterable[TaskState | str] | None = None,
        task_type: str | Iterable[str] | None = None,
        source: str | Iterable[str] | None = None,
        tenant: str | None = None,
        source_id: str | None = None,
        assignee: str | None = None,
        label: str | Iterable[str] | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        after: UUID | str | None = None,
    ) -> TaskPage:
        """Tasks matching every given filter, newest first; ``next_cursor`` pages on, and so
        does ``after`` (the id of the last task seen), in place of a cursor.

        ``label``: the tasks carry this label, or every one of these labels.
        ``created_after`` (inclusive) and ``created_before`` (exclusive): datetimes or ISO 8601
        text, UTC when they name no offset; InvalidInput names a bad one.
        """
        return await reads.list_tasks(
            await self._ready(),
            tenant=in_scope(self.tenant, tenant),
            states=reads.parse_states(state),
            task_types=reads.names(task_type),
            sources=reads.names(source),
            source_id=source_id,
            assignee=assignee,
            labels=reads.names(label),
            created_after=created_after,
            created_before=created_before,
            limit=limit,
            cursor=cursor,
            after=after,
        )


class _LoopThread:
    """An event loop on a daemon thread, for running AsyncQueue from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agentqueue-loop", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
        self.loop.close()


def _facade(
    method: Callable[Concatenate[AsyncQueue, P], Awaitable[R]],
) -> Callable[Concatenate[Queue, P], R]:
    @functools.wraps(method)
    def call(self: Queue, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._loop.run(method(self._async, *args, **kwargs))  # type: ignore[arg-type]

    return call  # type: ignore[return-value]


class Queue:
    """The synchronous facade of :class:`AsyncQueue`: same constructor, same method names."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self._loop = _LoopThread()
        try:
            self._async = AsyncQueue(url, **options)
        except BaseException:
            self._loop.stop()
            raise

    @property
    def url(self) -> str:
        """The database URL."""
        return self._async.url

    @property
    def aio(self) -> AsyncQueue:
        """The AsyncQueue underneath."""
        return self._async

    def close(self) -> None:
        """Release connections and stop the private event loop."""
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def handlers(self) -> dict[str, Handler]:
        """Registered handlers by task type."""
        return self._async.handlers

    @property
    def tools(self) -> dict[str, ToolFn]:
        """Registered tool runners by tool name."""
        return self._async.tools

    def tool(self, name: str) -> Callable[[T_Tool], T_Tool]:
        """Register the decorated function as the runner of tool ``name``."""
        return self._async.tool(name)

    def handler(self, task_type: str) -> Callable[[H], H]:
        """Register the decorated function as the handler of ``task_type``."""
        return self._async.handler(task_type)

    def run_worker(self, **options: Any) -> None:
        """Run a worker (see AsyncQueue.run_worker) until Ctrl-C, SIGTERM, or ``stop_worker``."""
        stop = threading.Event()
        self._worker_stop = stop

        async def go() -> None:
            event = asyncio.Event()
            loop = asyncio.get_running_loop()
            threading.Thread(
                target=lambda: (stop.wait(), loop.call_soon_threadsafe(event.set)), daemon=True
            ).start()
            await self._async.run_worker(stop=event, **options)

        future = asyncio.run_coroutine_threadsafe(go(), self._loop.loop)
        while True:
            try:
                future.result()
                return
            except KeyboardInterrupt:
                stop.set()

    def stop_worker(self) -> None:
        """Ask a worker started with run_worker (in another thread) to stop gracefully."""
        stop = getattr(self, "_worker_stop", None)
        if stop is not None:
            stop.set()

    open = _facade(AsyncQueue.open)
    migrate = _facade(AsyncQueue.migrate)
    submit = _facade(AsyncQueue.submit)
    submit_many = _facade(AsyncQueue.submit_many)
    get = _facade(AsyncQueue.get)
    waiting = _facade(AsyncQueue.waiting)
    events = _facade(AsyncQueue.events)
    prompt = _facade(AsyncQueue.prompt)
    stats = _facade(AsyncQueue.stats)
    work_left = _facade(AsyncQueue.work_left)
    agents = _facade(AsyncQueue.agents)
    dead_letters = _facade(AsyncQueue.dead_letters)
    cancel = _facade(AsyncQueue.cancel)
    review = _facade(AsyncQueue.review)
    requeue = _facade(AsyncQueue.requeue)
    archive = _facade(AsyncQueue.archive)
    approve = _facade(AsyncQueue.approve)
    reject = _facade(AsyncQueue.reject)
    claim = _facade(AsyncQueue.claim)
    heartbeat = _facade(AsyncQueue.heartbeat)
    finish = _facade(AsyncQueue.finish)
    complete = _facade(AsyncQueue.complete)
    fail = _facade(AsyncQueue.fail)
    release = _facade(AsyncQueue.release)
    admit = _facade(AsyncQueue.admit)
    reclaim_lapsed = _facade(AsyncQueue.reclaim_lapsed)
    promote_due_retries = _facade(AsyncQueue.promote_due_retries)
    tick = _facade(AsyncQueue.tick)
    deliver = _facade(AsyncQueue.deliver)
    submit_tool_result = _facade(AsyncQueue.submit_tool_result)
    pause = _facade(AsyncQueue.pause)
    resume = _facade(AsyncQueue.resume)
    paused = _facade(AsyncQueue.paused)
    leader = _facade(AsyncQueue.leader)
    deliver_alerts = _facade(AsyncQueue.deliver_alerts)
    purge_dead_letters = _facade(AsyncQueue.purge_dead_letters)
    verify = _facade(AsyncQueue.verify)
    logs = _facade(AsyncQueue.logs)
    thread = _facade(AsyncQueue.thread)
    add_schedule = _facade(AsyncQueue.add_schedule)
    schedules = _facade(AsyncQueue.schedules)
    remove_schedule = _facade(AsyncQueue.remove_schedule)
    fire_schedules = _facade(AsyncQueue.fire_schedules)
    deliveries = _facade(AsyncQueue.deliveries)
    delivery = _facade(AsyncQueue.delivery)
    retry_delivery = _facade(AsyncQueue.retry_delivery)
    create_token = _facade(AsyncQueue.create_token)
    tokens = _facade(AsyncQueue.tokens)
    revoke_token = _facade(AsyncQueue.revoke_token)
    list = _facade(AsyncQueue.list)
