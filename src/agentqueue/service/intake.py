"""GitHub webhook deliveries (R18): checked, decided by ``intake.github`` and applied in ONE
transaction with the record of the delivery id, so a redelivery (GitHub's Redeliver, or two
copies racing) finds the id taken and is answered what the first got, changing nothing.

Deliveries may arrive out of order. Per issue or pull request the transaction keeps (locked)
the open/closed state and the head commit last seen, each with the ``updated_at`` the payload
carried, and holds every delivery to them:

- a close cancels the live tasks and is kept; a delivery whose issue was updated no later than
  a close already seen creates nothing (a close wins a tie of timestamps), so a late ``opened``
  or ``labeled`` never brings back a live task;
- a review trigger for a pull request updated before the head last seen is older than that
  push: ignored, so it never supersedes the newer review;
- a new head cancels the live review of the older commit (reason naming the new sha) and
  submits the review of the new one, idempotency key ``owner/repo#N@sha``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from ..config import GitHubRule
from ..domain.errors import FieldProblem, InvalidInput
from ..domain.limits import parse_json
from ..domain.models import Task
from ..domain.states import Action, Request, TaskState
from ..intake import github, github_payload
from ..spec import parse_specs
from ..store import DedupKey, NewTask, Tx
from ..store.base import IntakeSource
from .records import decide_and_apply
from .runtime import Runtime
from .submit import new_records

log = logging.getLogger("agentqueue.intake")

SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
DELIVERY_MAX = 100


@dataclass(frozen=True)
class Answer:
    """What the webhook route answers: ``status`` and ``body``; a ``problem`` (401, 400,
    422) carries ``detail`` in the body and ``errors`` naming fields."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    problem: bool = False
    errors: tuple[FieldProblem, ...] = ()


def _problem(status: int, detail: str, *errors: FieldProblem) -> Answer:
    return Answer(status, {"detail": detail}, problem=True, errors=errors)


def _bad(field_name: str, message: str) -> Answer:
    return _problem(400, f"{field_name}: {message}", FieldProblem(field_name, message))


def _ignored(delivery: str, why: str, status: int = 202) -> Answer:
    log.info("GitHub delivery %s ignored: %s", delivery or "(no id)", why)
    return Answer(status, {"ignored": why})


class _Ignore(Exception):
    """Raised inside the transaction: nothing is done (and nothing written), for this reason."""


async def receive(
    rt: Runtime, headers: Mapping[str, str], body: bytes, env: Mapping[str, str] | None = None
) -> Answer:
    """Handle one delivery: its raw ``body`` and its headers (names in lower case). ``env``
    holds the secrets' variables (the process environment by default)."""
    environ = os.environ if env is None else env
    rules = rt.settings.intake.github
    given = headers.get(SIGNATURE_HEADER.lower())
    if not given:
        return _problem(401, f"{SIGNATURE_HEADER} is required: the body's HMAC-SHA256 signature")
    if not given.startswith(github.SIGNATURE_PREFIX):
        return _problem(401, f"{SIGNATURE_HEADER} must be sha256=<hex digest>")
    if not rules:
        return _problem(401, "GitHub intake is not configured: no [[intake.github]] rule")
    try:
        parsed: Any = parse_json(body, nul=False)
    except (ValueError, RecursionError):
        parsed = None
    target = github.target_of(parsed)
    named = target.repository is not None or target.owner is not None
    # A body that names no repository can only be told malformed (400) or forged (401).
    candidates = github.rules_for(rules, target) if named else list(rules)

    def secret_of(rule: GitHubRule) -> str | None:
        secret = environ.get(rule.secret_env)
        if not secret:
            log.warning(
                "intake rule %s: environment variable %s is not set; it verifies nothing",
                rule.repository,
                rule.secret_env,
            )
        return secret or None

    rule = github.verify(candidates, secret_of, body, given)
    if rule is None:
        what = target.repository or target.owner or "the body"
        log.warning(
            "GitHub delivery %s refused: %s does not verify for %s (%d rule(s) match)",
            headers.get(DELIVERY_HEADER.lower(), "(no id)"),
            SIGNATURE_HEADER,
            what,
            len(candidates),
        )
        return _problem(
            401,
            f"{SIGNATURE_HEADER} does not verify with the secret of any rule for {what}",
        )
    if parsed is None:
        return _bad("body", "not valid JSON")
    if not isinstance(parsed, dict):
        return _bad("body", "must be a JSON object")
    if not named:
        return _bad("repository", "required: the repository the delivery is about")
    event = headers.get(EVENT_HEADER.lower(), "").strip()
    if not event:
        return _bad(EVENT_HEADER, "required: the event's name")
    delivery = headers.get(DELIVERY_HEADER.lower(), "").strip()
    if not delivery or len(delivery) > DELIVERY_MAX or not delivery.isprintable():
        return _bad(DELIVERY_HEADER, f"required: the delivery's id (1-{DELIVERY_MAX} characters)")
    if event not in github.EVENTS:
        return _ignored(delivery, f"event {event} is not handled")
    try:
        decision = github.decide(rule, event, parsed)
    except ValidationError as exc:
        found = github_payload.problems(exc)
        return _problem(400, "; ".join(str(p) for p in found), *found)
    if isinstance(decision, github.Pong):
        log.info("GitHub ping %s for %s", delivery, target.repository or target.owner)
        return Answer(200, {"pong": True, "zen": decision.zen})
    if isinstance(decision, github.Ignored):
        return _ignored(delivery, decision.reason)
    try:
        return await apply(rt, decision, delivery, event, parsed.get("action"))
    except InvalidInput as exc:
        return _problem(422, str(exc), *exc.problems)


async def apply(
    rt: Runtime, plan: github.Plan, delivery: str, event: str, action: object = None
) -> Answer:
    """Apply ``plan`` and record ``delivery`` in one transaction (see the module notes)."""
    records = []
    if plan.new_task is not None:
        specs = parse_specs(
            [_spec_fields(plan, plan.new_task)],
            max_payload_bytes=rt.settings.queue.max_payload_bytes,
            single=True,
        )
        records = await new_records(rt, specs)
    now = rt.clock.now()
    head: dict[str, Any] = {
        "delivery": delivery,
        "event": event,
        "action": action if isinstance(action, str) else None,
        "tenant": plan.tenant,
        "source": plan.source,
        "source_id": plan.source_id,
        "trigger": plan.trigger,
    }
    try:
        async with rt.store.transaction() as tx:
            if not await tx.claim_delivery(delivery, event, now):
                first = await tx.delivery_answer(delivery) or {}
                log.info("GitHub delivery %s is a duplicate: nothing done", delivery)
                return Answer(200, {**first, "duplicate": True})
            src = await tx.lock_intake_source(plan.tenant, plan.source, plan.source_id)
            done, src = await _carry_out(rt, tx, plan, src, records)
            answer = {**head, "tasks": done}
            await tx.save_intake_source(src)
            await tx.record_delivery_answer(delivery, answer)
    except _Ignore as why:
        return _ignored(delivery, str(why))
    log.info(
        "GitHub delivery %s (%s) on %s: %s",
        delivery,
        plan.trigger,
        plan.source_id,
        ", ".join(f"{t['outcome']} {t['id']}" for t in done) or "nothing to do",
    )
    return Answer(200, {**answer, "duplicate": False})


def _spec_fields(plan: github.Plan, new: github.NewTask) -> dict[str, Any]:
    return {
        "tenant": plan.tenant,
        "source": plan.source,
        "source_id": plan.source_id,
        "title": new.title,
        "task_type": new.task_type,
        "priority": new.priority,
        "idempotency_key": new.idempotency_key,
        "payload": new.payload,
        "requested_by": plan.actor,
    }


def _seen(task: Task, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": str(task.id),
        "outcome": outcome,
        "state": task.state.value,
        "task_type": task.task_type,
        "priority": task.priority,
        **extra,
    }


async def _carry_out(
    rt: Runtime, tx: Tx, plan: github.Plan, src: IntakeSource, records: Sequence[NewTask]
) -> tuple[list[dict[str, Any]], IntakeSource]:
    """The plan's changes, in ``tx``; raises _Ignore when ordering or the tasks' states leave
    nothing to do."""
    now = rt.clock.now()
    sid = plan.source_id
    src = _ordered(plan, src)
    live = await tx.lock_live_by_source(plan.tenant, plan.source, sid)
    done: list[dict[str, Any]] = []

    async def act(tasks: Sequence[Task], request: Request, outcome: str) -> list[Task]:
        written, refusals = await decide_and_apply(tx, tasks, lambda _task: request)
        done.extend(_seen(t, outcome, reason=request.reason) for t in written)
        if refusals and not written:
            raise _Ignore("; ".join(str(r) for r in refusals.values()))
        return written

    if plan.state == "closed":
        if live:
            reason = f"{sid} was closed on GitHub by {plan.actor}"
            await act(
                live, Request(Action.CANCEL, now, actor=plan.actor, reason=reason), "cancelled"
            )
        return done, src
    if plan.head is not None:
        src = _newer_head(plan, src)
        stale = [
            t for t in live if t.task_type == plan.review_type and _reviewed_sha(t) != plan.head
        ]
        if stale:
            reason = f"superseded by push {plan.head} to {sid}"
            request = Request(Action.CANCEL, now, actor=plan.actor, reason=reason)
            cancelled = {t.id for t in await act(stale, request, "cancelled")}
            live = [t for t in live if t.id not in cancelled]
    if plan.command == "cancel":
        if not live:
            raise _Ignore(f"/agent cancel: {sid} has no live task")
        reason = f"/agent cancel by {plan.actor} on {sid}"
        await act(live, Request(Action.CANCEL, now, actor=plan.actor, reason=reason), "cancelled")
    elif plan.command == "retry":
        dead = [t for t in live if t.state in (TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW)]
        if not dead:
            states = ", ".join(f"{t.id} is {t.state.value}" for t in live) or "no live task"
            raise _Ignore(f"/agent retry: {sid} has no dead-lettered task ({states})")
        reason = f"/agent retry by {plan.actor} on {sid}"
        await act(dead, Request(Action.REQUEUE, now, actor=plan.actor, reason=reason), "requeued")
    elif plan.command == "priority":
        if not live:
            raise _Ignore(f"priority: {sid} has no live task to reprioritize")
        assert plan.priority is not None
        request = Request(
            Action.REPRIORITIZE,
            now,
            actor=plan.actor,
            priority=plan.priority,
            reason=f"priority {plan.priority} asked by {plan.actor} on {sid} ({plan.trigger})",
        )
        await act(live, request, "reprioritized")
    if records:
        done.append(await _submit(rt, tx, live, records))
    return done, src


def _ordered(plan: github.Plan, src: IntakeSource) -> IntakeSource:
    """The source's state after ``plan``'s open or close; _Ignore for a delivery older than a
    close already seen (a close wins a tie)."""
    seen_at = src.state_at
    if plan.state == "closed":
        if seen_at is not None and plan.at < seen_at:
            raise _Ignore(
                f"{plan.source_id}: this close ({plan.at.isoformat()}) is older than the"
                f" {src.state} state seen at {seen_at.isoformat()}"
            )
        return replace(src, state="closed", state_at=plan.at)
    if src.state == "closed" and seen_at is not None and plan.at <= seen_at:
        raise _Ignore(
            f"{plan.source_id} was closed at {seen_at.isoformat()}, after this event"
            f" ({plan.at.isoformat()})"
        )
    if plan.state == "open" and (seen_at is None or plan.at >= seen_at):
        return replace(src, state="open", state_at=plan.at)
    return src


def _newer_head(plan: github.Plan, src: IntakeSource) -> IntakeSource:
    """The source with ``plan``'s head as the newest; _Ignore for a push older than the head
    already seen (a tie keeps the order of arrival)."""
    if src.head_at is not None and plan.at < src.head_at and plan.head != src.head_sha:
        raise _Ignore(
            f"{plan.source_id}: head {plan.head} ({plan.at.isoformat()}) is older than head"
            f" {src.head_sha} ({src.head_at.isoformat()}); its review is not superseded"
        )
    if src.head_at is not None and plan.at < src.head_at:
        return src
    return replace(src, head_sha=plan.head, head_at=plan.at)


def _reviewed_sha(task: Task) -> str | None:
    head = task.payload.get("head") if isinstance(task.payload, dict) else None
    sha = head.get("sha") if isinstance(head, dict) else None
    return sha if isinstance(sha, str) else None


async def _submit(
    rt: Runtime, tx: Tx, live: Sequence[Task], records: Sequence[NewTask]
) -> dict[str, Any]:
    """The plan's task: the source's live task if it has one (SPEC R2), else the new one, else
    (its idempotency key is taken) the task that holds the key."""
    if live:
        return _seen(live[0], "matched", matched_by="source")
    inserted = await tx.insert_tasks(records)
    record = records[0]
    if record.task.id in inserted:
        task = record.task.evolve(seq=inserted[record.task.id])
        return _seen(task, "created")
    spec = record.task
    found = await rt.store.find_existing(
        [DedupKey(spec.tenant, spec.idempotency_key, spec.source, spec.source_id)]
    )
    for task in found:
        if task.idempotency_key == spec.idempotency_key:
            return _seen(task, "matched", matched_by="idempotency_key")
    for task in found:
        if not task.terminal:
            return _seen(task, "matched", matched_by="source")
    raise _Ignore(f"{spec.source_id}: the task could not be stored against a concurrent change")
