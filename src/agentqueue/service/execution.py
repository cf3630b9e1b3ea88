"""What executors do (R5): claim tasks, heartbeat their leases, and report outcomes.

Every write after the claim names the lock_token; the state machine refuses it (LeaseLost) once
the lease no longer holds, so two executors never both finish one task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from ..domain.audit import canonical_json
from ..domain.deliveries import needs_delivery
from ..domain.errors import FieldProblem, InvalidInput
from ..domain.limits import joined, json_problem
from ..domain.models import LogRecord, Task
from ..domain.states import Action, Refusal, RefusalKind, Request, TaskState, bulk_event
from ..domain.values import NUL, without_nul
from ..store import Lease
from ..store.base import ClaimAdmission, ClaimParams, Later, Tx
from .records import apply_decisions, decide_and_apply
from .runtime import Runtime

MAX_RESULT_BYTES = 1024 * 1024


async def claim(
    rt: Runtime,
    n: int,
    worker: str,
    task_types: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
) -> list[Task]:
    """Move up to ``n`` queued tasks to executing for ``worker``, each with a fresh lock_token.

    Tasks come in priority order (P0 lane, aged priority, then FIFO); tasks other claimers hold
    are skipped, never waited for. With ``agents`` (the claimer runs these agents; empty: it
    runs none), a task routed to an agent is claimed only by that agent's executors.
    """
    # CLAIM is one of the domain's set-wise actions (BULK_ACTIONS): the store applies it to the
    # whole batch in one statement.
    return await rt.store.claim(await claim_params(rt, n, worker, task_types, agents))


async def claim_in(
    tx: Tx,
    rt: Runtime,
    n: int,
    worker: str,
    task_types: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
    now: datetime | None = None,
) -> Later[list[Task]]:
    """:func:`claim`, inside ``tx`` (the claimed tasks are ``worker``'s once it commits, and
    arrive with its COMMIT: see Tx.claim_next), at ``now`` (the transaction's time) unless
    given."""
    return await tx.claim_next(await claim_params(rt, n, worker, task_types, agents, now))


async def claim_params(
    rt: Runtime,
    n: int,
    worker: str,
    task_types: Sequence[str] | None,
    agents: Sequence[str] | None,
    now: datetime | None = None,
) -> ClaimParams:
    """What a claim of up to ``n`` tasks for ``worker`` sends the store."""
    if n < 1:
        raise InvalidInput("must be at least 1", "n")
    if not worker:
        raise InvalidInput("must name the worker", "worker")
    now = now or rt.clock.now()
    settings = rt.settings.queue
    admit = None
    if rt.settings.claims_admit:
        # Under a global cap alone the claim admits what it takes: ADMIT, then CLAIM.
        admission = rt.settings.admission
        assert admission.max_active is not None
        admit = ClaimAdmission(
            admission.max_active, admission.fair_share, bulk_event(Action.ADMIT, now, worker)
        )
    return ClaimParams(
        limit=n,
        now=now,
        event=bulk_event(Action.CLAIM, now, worker),
        aging_secs=settings.aging_interval_secs,
        ttl_secs=settings.lease_ttl_secs,
        grace_secs=settings.deadline_grace_secs,
        task_types=task_types,
        # Read at most once a second: a pause reaches every worker's claims within that.
        paused=sorted(await rt.paused_types()),
        agents=agents,
        admit=admit,
    )


@dataclass(frozen=True)
class HeartbeatReply:
    """Which leases still hold, and for the lost ones, the state their task is in now."""

    held: frozenset[UUID]
    lost: dict[UUID, TaskState | None]


async def heartbeat(rt: Runtime, leases: Sequence[Lease]) -> HeartbeatReply:
    """Extend the given leases. A lease that no longer holds is reported lost, with the state
    of its task (``cancelled`` tells the executor to stop at once)."""
    now = rt.clock.now()
    settings = rt.settings.queue
    held = await rt.store.heartbeat(
        leases, now, settings.lease_ttl_secs, settings.deadline_grace_secs
    )
    lost_ids = [lease.task_id for lease in leases if lease.task_id not in held]
    lost: dict[UUID, TaskState | None] = dict.fromkeys(lost_ids)
    if lost_ids:
        for task in await rt.store.get_tasks(lost_ids):
            lost[task.id] = task.state
    return HeartbeatReply(frozenset(held), lost)


class OutcomeKind(StrEnum):
    """How an attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    RELEASED = "released"
    PREEMPTED = "preempted"
    WAITING_TOOL = "waiting_tool"


_ACTIONS = {
    OutcomeKind.COMPLETED: Action.COMPLETE,
    OutcomeKind.FAILED: Action.FAIL,
    OutcomeKind.RELEASED: Action.RELEASE,
    OutcomeKind.PREEMPTED: Action.PREEMPT,
    OutcomeKind.WAITING_TOOL: Action.WAIT_TOOL,
}


@dataclass(frozen=True)
class Outcome:
    """An executor's report on one attempt."""

    task_id: UUID
    lock_token: UUID
    kind: OutcomeKind
    result: Any = None
    error: str | None = None
    retryable: bool = True
    timed_out: bool = False
    """FAILED: the attempt ran out of time (counted as a timeout by the metrics)."""
    reason: str = ""
    claimed: Task | None = None
    """The task as the executor claimed it, if it has it: then the outcome is decided on it and
    written with a guard, without reading the row first (the row is read only if it moved on)."""
    tool_call: Mapping[str, Any] | None = None
    """WAITING_TOOL: the call (``id``, ``name``, ``args``, ``timeout_secs``)."""
    checkpoint: Any = None
    checkpointed: bool = False
    """The attempt's latest progress, kept with the task (not with a completion)."""
    traceback: str | None = None
    """FAILED by a handler's exception: its traceback, for the worker's log line (it is kept
    with the attempt's logs, not on the task: ``error`` stays the short message)."""


async def finish(
    rt: Runtime, outcomes: Sequence[Outcome], actor: str, logs: Sequence[LogRecord] = ()
) -> dict[UUID, Task | Refusal]:
    """Record many outcomes, and the captured output of attempts; each task gets its new image
    or a refusal. Completions are written set-wise in one statement; every other outcome, and
    every completion that statement could not make (its lease moved on), is decided row by row
    in one transaction, with the logs. Completions that call for a delivery (see
    ``domain.deliveries.needs_delivery``) are decided row by row too, so their deliveries are
    stored with them."""
    outcomes = [storable(o) for o in outcomes]
    logs = [replace(r, text=without_nul(r.text)) for r in logs]
    by_id = {o.task_id: o for o in outcomes}
    if len(by_id) != len(outcomes):
        raise InvalidInput("reports the same task twice", "outcomes")
    now = rt.clock.now()
    policy = rt.settings.retry.policy()

    def request(task: Task) -> Request:
        o = by_id[task.id]
        return Request(
            _ACTIONS[o.kind],
            now,
            actor=actor,
            reason=o.reason,
            lock_token=o.lock_token,
            result=o.result,
            error=o.error,
            retryable=o.retryable,
            timed_out=o.timed_out,
            backoff=policy,
            spread=rt.spread(),
            tool_call=o.tool_call,
            checkpoint=o.checkpoint,
            checkpointed=o.checkpointed,
        )

    # The set-wise statement writes no deliveries: a completion that calls for one (a callback,
    # a reply on its GitHub issue), or whose claimed image is not at hand to tell, is decided
    # row by row below, where the deliveries are stored with it.
    # Nor are completions its pipeline must judge first (``on_complete``): they are judged in
    # the transaction that writes them.
    pipelines = rt.pipelines
    completing = [
        o
        for o in outcomes
        if o.kind is OutcomeKind.COMPLETED
        and o.claimed is not None
        and not needs_delivery(o.claimed)
        and not pipelines.checks_completion(o.claimed.kind)
    ]
    items = [(o.task_id, o.lock_token, o.result) for o in completing]
    heads = (
        await rt.store.complete(
            items,
            now,
            bulk_event(Action.COMPLETE, now, actor),
            wake_scheduler=rt.settings.admission_limited,
        )
        if items
        else {}
    )
    written = [
        _completed(o.claimed, o.result, now, heads[o.task_id])
        for o in completing
        if o.task_id in heads and o.claimed is not None
    ]
    tried = {o.task_id for o in completing}
    rest = [o for o in outcomes if o.task_id not in heads]
    refusals: dict[UUID, Refusal] = {}
    if rest or logs:
        async with rt.store.transaction() as tx:
            by_id.update(await _judged(rt, tx, rest, tried))
            # Decided on the claimed image, written with a guard: every outcome but a completion
            # the set-wise statement tried (its lease moved on: read it afresh).
            known = [o.claimed for o in rest if o.claimed is not None and o.task_id not in tried]
            more, refusals, stale = await apply_decisions(tx, known, request)
            written += more
            unknown = [o.task_id for o in rest if o.claimed is None or o.task_id in tried]
            if stale or unknown:
                again, more_refusals = await decide_and_apply(
                    tx, await tx.lock([*stale, *unknown]), request
                )
                written += again
                refusals.update(more_refusals)
            # Output belongs to the attempt whatever became of the outcome, so it is kept even
            # when the outcome was refused (a lease lost just before the report).
            await tx.insert_logs(logs)
    out: dict[UUID, Task | Refusal] = {t.id: t for t in written}
    out.update(refusals)
    for task_id in by_id:
        if task_id not in out:
            kind = _ACTIONS[by_id[task_id].kind]
            out[task_id] = Refusal(task_id, kind, None, RefusalKind.FENCED, "no such task")
    return out


async def _judged(
    rt: Runtime, tx: Tx, outcomes: Sequence[Outcome], tried: set[UUID]
) -> dict[UUID, Outcome]:
    """The outcomes their task's pipeline changes (R25): a timeout it completes or refuses
    otherwise (``on_timeout``), a completion it refuses (``on_complete``), made retryable
    failures with its reason. Judged inside ``tx``, which writes them."""
    pipelines = rt.pipelines

    def asks(o: Outcome) -> bool:
        if o.kind is OutcomeKind.FAILED:
            return o.timed_out
        # A completion the set-wise statement tried is of a kind that does not judge them.
        return (
            o.kind is OutcomeKind.COMPLETED
            and o.task_id not in tried
            and (o.claimed is None or pipelines.checks_completion(o.claimed.kind))
        )

    asked = [o for o in outcomes if asks(o)]
    if not asked:
        return {}
    images = {o.task_id: o.claimed for o in asked if o.claimed is not None}
    missing = [o.task_id for o in asked if o.task_id not in images]
    if missing:
        images.update({t.id: t for t in await tx.lock(missing)})
    judged: dict[UUID, Outcome] = {}
    for o in asked:
        task = images.get(o.task_id)
        if task is None or task.lock_token != o.lock_token:
            continue  # not this attempt's any more: the state machine refuses the outcome
        if o.kind is OutcomeKind.COMPLETED:
            if not pipelines.checks_completion(task.kind):
                continue
            verdict = await pipelines.on_complete(task, o.result, tx)
        else:
            verdict = await pipelines.on_timeout(task, tx)
        if verdict.refused is not None:
            judged[o.task_id] = replace(
                o,
                kind=OutcomeKind.FAILED,
                result=None,
                error=verdict.refused,
                retryable=True,
                reason=verdict.refused,
            )
        elif verdict.completes:
            judged[o.task_id] = replace(
                o,
                kind=OutcomeKind.COMPLETED,
                result=checked_result(verdict.result),
                error=None,
                timed_out=False,
                reason=verdict.reason,
            )
    return judged


def _completed(claimed: Task, result: Any, now: datetime, head: tuple[int, str]) -> Task:
    """The task as the set-wise COMPLETE left it: decide()'s changes on the claimed image."""
    return claimed.evolve(
        state=TaskState.COMPLETED,
        result=result,
        error=None,
        state_reason=None,
        finished_at=now,
        lock_token=None,
        locked_at=None,
        heartbeat_at=None,
        lease_expires_at=None,
        assigned_to=None,
        updated_at=now,
        event_seq=head[0],
        last_hash=head[1],
    )


def storable(outcome: Outcome) -> Outcome:
    """The outcome as it can be stored on every backend: free text (error, reason) with NUL
    characters replaced; a result that cannot be kept (see ``checked_result``), or a checkpoint
    or tool call holding a NUL, makes the attempt fail (not retryable: it would report the same
    again), naming the field, rather than leave a batch of outcomes no database write can take."""
    if (
        outcome.result is None
        and outcome.checkpoint is None
        and outcome.tool_call is None
        and (outcome.error is None or NUL not in outcome.error)
        and NUL not in outcome.reason
    ):
        return outcome  # nothing to check: the common no-op completion stays cheap
    problem = unstorable(outcome)
    if problem is not None:
        return replace(
            outcome,
            kind=OutcomeKind.FAILED,
            result=None,
            tool_call=None,
            checkpoint=None,
            checkpointed=False,
            retryable=False,
            error=str(problem),
        )
    if outcome.error is not None and NUL in outcome.error:
        outcome = replace(outcome, error=without_nul(outcome.error))
    if NUL in outcome.reason:
        outcome = replace(outcome, reason=without_nul(outcome.reason))
    return outcome


def unstorable(outcome: Outcome) -> FieldProblem | None:
    """Why an outcome's data cannot be kept, naming the field (a completion's result that
    ``checked_result`` refuses; a checkpoint or tool call holding a NUL), or None."""
    if outcome.kind is OutcomeKind.COMPLETED:
        try:
            checked_result(outcome.result)
        except InvalidInput as exc:
            return exc.problems[0]
    for name in ("checkpoint", "tool_call"):
        problem = json_problem(getattr(outcome, name))
        if problem is not None:
            where, message = problem
            return FieldProblem(joined(name, where), message)
    return None


def checked_result(value: Any, limit: int = MAX_RESULT_BYTES) -> Any:
    """``value``, if it can be kept: JSON of at most ``limit`` bytes in canonical form, holding
    no NUL character; InvalidInput naming the field otherwise. A completion's result and a tool
    call's answer are held to it alike; so are the bounds of domain.limits (nesting, number
    length, finite numbers)."""
    problem = json_problem(value)
    if problem is not None:
        where, message = problem
        raise InvalidInput(message, joined("result", where))
    try:
        size = len(canonical_json(value).encode())
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON: {exc}", "result") from None
    if size > limit:
        raise InvalidInput(f"{size} bytes, over the limit of {limit}", "result")
    return value


async def finish_one(rt: Runtime, outcome: Outcome, actor: str) -> Task:
    """Record one outcome; raise LeaseLost (or TransitionRefused) if it is refused, and
    InvalidInput, writing nothing, if its result cannot be kept (a batch from a worker fails
    that attempt instead: see ``storable``)."""
    problem = unstorable(outcome)
    if problem is not None:
        raise InvalidInput(problem)
    result = (await finish(rt, [outcome], actor))[outcome.task_id]
    if isinstance(result, Refusal):
        raise result.error()
    return result
