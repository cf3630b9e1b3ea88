"""Submitting work (R2): validation, dedup by source, idempotency keys, bulk insert."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..domain.errors import Conflict, FieldProblem, InvalidInput
from ..domain.models import Task, default_timeout
from ..domain.states import TaskState
from ..ids import new_task_id
from ..spec import TaskSpec, parse_specs
from ..store import DedupKey, NewTask
from ..tracing import current_traceparent
from .records import ADMITTER, new_record
from .runtime import Runtime

BATCH = 1000
"""Tasks per insert statement."""


def admissible_at_submit(rt: Runtime, task: Task, paused: frozenset[str]) -> bool:
    """Whether admission would take ``task`` at once, so it is admitted as it is submitted.

    With no admission limits and no agents to route to (the default), the scheduler admits every
    task that may run now (nothing holds it, no run_after in the future, its type not paused)
    on its next pass anyway; recording that admission with the submit saves the pass, the
    wake-up and a write per task. Under caps or rate limits only the scheduler admits, since only
    it counts what is admitted (and routes).
    """
    settings = rt.settings
    if not settings.queue.admit_on_submit or settings.admission_limited:
        return False
    if task.task_type in paused:
        return False
    return task.run_after is None or task.run_after <= task.created_at


@dataclass(frozen=True)
class SubmitResult:
    """What a submit did: the task, whether it is new, and if not, why an existing one matched."""

    task: Task
    created: bool
    matched_by: str | None = None  # "idempotency_key" or "source"

    def to_json(self) -> dict[str, Any]:
        """The task's JSON with ``created`` (and ``matched_by`` for an existing task)."""
        out = self.task.to_json()
        out["created"] = self.created
        if self.matched_by:
            out["matched_by"] = self.matched_by
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SubmitResult:
        """The result :meth:`to_json` gave (as the API answers a submit)."""
        return cls(Task.from_json(data), bool(data["created"]), data.get("matched_by"))


def build_task(rt: Runtime, spec: TaskSpec, kind: str = "task") -> Task:
    """A new pending Task of ``kind`` from a validated spec (no I/O)."""
    now = rt.clock.now()
    eligible = max(now, spec.run_after) if spec.run_after else now
    return Task(
        id=spec.id or new_task_id(),
        tenant=spec.tenant,
        source=spec.source,
        source_id=spec.source_id,
        title=spec.title,
        task_type=spec.task_type,
        payload=spec.payload,
        priority=spec.priority,
        state=TaskState.PENDING,
        max_retries=spec.max_retries,
        retry_count=0,
        timeout_secs=spec.timeout_secs or default_timeout(spec.task_type, rt.settings.timeouts()),
        created_at=now,
        updated_at=now,
        eligible_at=eligible,
        requested_by=spec.requested_by,
        assignee=spec.assignee,
        kind=kind,
        labels=spec.labels,
        depends_on=spec.depends_on,
        idempotency_key=spec.idempotency_key,
        callback_url=spec.callback_url,
        run_after=spec.run_after,
        traceparent=spec.traceparent
        or (current_traceparent() if rt.settings.logging.opentelemetry else None),
        in_reply_to=spec.in_reply_to,
    )


async def submit_many(
    rt: Runtime,
    items: Iterable[TaskSpec | Mapping[str, Any]],
    *,
    tenant: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    single: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[SubmitResult]:
    """Validate every item, then store the new ones; return one result per task, in order:
    one per item, and for an item its pipeline broadcasts, one per delivery.

    ``tenant`` scopes the call: items default to it and may not name another. Nothing is written
    unless every item is valid. ``progress`` is told how many were stored after each batch.
    """
    merged = dict(defaults or {})
    merged.setdefault("tenant", tenant or rt.settings.queue.default_tenant)
    specs = parse_specs(
        list(items),
        max_payload_bytes=rt.settings.queue.max_payload_bytes,
        allow_private_callbacks=rt.settings.callbacks.allow_private,
        defaults=merged,
        single=single,
    )
    return await submit_parsed(rt, specs, tenant=tenant, single=single, progress=progress)


async def submit_parsed(
    rt: Runtime,
    specs: Sequence[TaskSpec],
    *,
    tenant: str | None = None,
    single: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[SubmitResult]:
    """:func:`submit_many` for specs ``parse_specs`` already made under ``rt``'s settings,
    every default applied (the API's gathered single submits): they are not validated again.
    Pipelines, the tenant scope and dependencies are checked here as there."""
    specs, kinds = _through_pipelines(rt, specs, single)
    await _check_scope_and_dependencies(rt, specs, kinds, tenant, single)
    results: list[SubmitResult | None] = [None] * len(specs)
    for start in range(0, len(specs), BATCH):
        chunk = list(range(start, min(start + BATCH, len(specs))))
        await _submit_chunk(rt, specs, kinds, chunk, results)
        if progress is not None:
            progress(len(chunk))
    return [r for r in results if r is not None]


def _through_pipelines(
    rt: Runtime, specs: Sequence[TaskSpec], single: bool
) -> tuple[list[TaskSpec], list[str]]:
    """Each spec's pipeline checks it and may expand it (broadcast): the specs to store and the
    kind of each."""
    problems: list[FieldProblem] = []
    out: list[TaskSpec] = []
    kinds: list[str] = []
    for index, spec in enumerate(specs):

        def name(field: str, index: int = index) -> str:
            return field if single else f"tasks[{index}].{field}"

        pipeline = rt.pipelines.for_spec(spec)
        if pipeline is None:
            problems.append(FieldProblem(name("kind"), f"no kind {spec.kind!r} is registered"))
            continue
        found = pipeline.problems(spec, name)
        problems.extend(found)
        if not found:
            expanded = pipeline.expand(spec)
            out.extend(expanded)
            kinds.extend([pipeline.kind] * len(expanded))
    if problems:
        raise InvalidInput(problems)
    return out, kinds


async def _check_scope_and_dependencies(
    rt: Runtime, specs: Sequence[TaskSpec], kinds: Sequence[str], tenant: str | None, single: bool
) -> None:
    problems: list[FieldProblem] = []

    def name(index: int, field: str) -> str:
        return field if single else f"tasks[{index}].{field}"

    if tenant is not None:
        for index, spec in enumerate(specs):
            if spec.tenant != tenant:
                problems.append(FieldProblem(name(index, "tenant"), f"must be {tenant!r} here"))
    # Tasks of this batch may name each other (by the ids their specs give) in depends_on.
    batch: dict[UUID, int] = {}
    for index, spec in enumerate(specs):
        if spec.id is not None:
            if spec.id in batch:
                problems.append(FieldProblem(name(index, "id"), "is given to two tasks"))
            batch.setdefault(spec.id, index)
    given = [spec.id for spec in specs if spec.id is not None]
    wanted = {dep for spec in specs for dep in spec.depends_on if dep not in batch}
    answered = {spec.in_reply_to for spec in specs if spec.in_reply_to is not None}
    looked_up = sorted({*given, *wanted, *answered}, key=str)
    # Most submits name no ids, no dependencies and no mail they answer: nothing to read.
    found = await rt.store.get_tasks(looked_up) if looked_up else []
    stored = {t.id: t.tenant for t in found}
    tasks = {t.id: t for t in found}
    for index, spec in enumerate(specs):
        if spec.in_reply_to is not None:
            problems.extend(
                _reply_problems(spec, kinds[index], tasks, "" if single else f"tasks[{index}]")
            )
    for index, spec in enumerate(specs):
        if spec.id is not None and stored.get(spec.id, spec.tenant) != spec.tenant:
            problems.append(FieldProblem(name(index, "id"), "is taken by another task"))
        for dep in spec.depends_on:
            in_batch = batch.get(dep)
            tenant = specs[in_batch].tenant if in_batch is not None else stored.get(dep)
            if tenant != spec.tenant:
                problems.append(FieldProblem(name(index, "depends_on"), f"no task {dep}"))
    cycle = find_cycle({spec.id: spec.depends_on for spec in specs if spec.id is not None})
    if cycle:
        path = " -> ".join(str(i) for i in cycle)
        problems.append(FieldProblem(name(batch[cycle[0]], "depends_on"), f"forms a cycle: {path}"))
    if problems:
        raise InvalidInput(problems)


def _reply_problems(
    spec: TaskSpec, kind: str, stored: Mapping[UUID, Task], prefix: str
) -> list[FieldProblem]:
    """What is wrong with ``spec`` as a reply: the mail it answers must exist in its tenant and
    be of its kind, and the reply must come from that mail's recipient."""
    parent = stored.get(spec.in_reply_to) if spec.in_reply_to is not None else None

    def name(field: str) -> str:
        return f"{prefix}.{field}" if prefix else field

    if parent is None or parent.tenant != spec.tenant:
        return [FieldProblem(name("in_reply_to"), f"no mail {spec.in_reply_to}")]
    if parent.kind != kind:
        return [
            FieldProblem(
                name("in_reply_to"), f"{parent.id} is of kind {parent.kind!r}, not {kind!r}"
            )
        ]
    if parent.assignee != spec.requested_by:
        return [
            FieldProblem(
                name("requested_by"),
                f"a reply to {parent.id} comes from its recipient {parent.assignee!r}, "
                f"not {spec.requested_by!r}",
            )
        ]
    return []


def find_cycle(graph: Mapping[UUID, Sequence[UUID]]) -> list[UUID] | None:
    """A dependency cycle in ``graph`` (task -> the tasks it depends on), as the path that
    closes it (first node repeated last), or None for a DAG. Tasks stored before this batch
    cannot depend on its new ones, so a cycle can only run through the batch."""
    done: set[UUID] = set()
    for root in graph:
        if root in done:
            continue
        path: list[UUID] = [root]
        on_path = {root}
        stack = [iter(graph.get(root, ()))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step in done or step not in graph:
                continue
            path.append(step)
            on_path.add(step)
            stack.append(iter(graph[step]))
    return None


async def _paused_types(rt: Runtime) -> frozenset[str]:
    if not rt.settings.queue.admit_on_submit or rt.settings.admission_limited:
        return frozenset()  # nothing is admitted at submit, so no need to ask
    return await rt.paused_types()


def _record(rt: Runtime, spec: TaskSpec, kind: str, paused: frozenset[str]) -> NewTask:
    """The new task of ``spec`` with its first events: held if its pipeline holds it, else
    admitted at once when admission would take it now."""
    task = build_task(rt, spec, kind)
    pipeline = rt.pipelines.get(kind)
    assert pipeline is not None  # chosen by _through_pipelines
    hold = pipeline.hold_new(task)
    admit = hold is None and admissible_at_submit(rt, task, paused)
    return new_record(task, spec.requested_by, ADMITTER if admit else None, hold)


async def new_records(rt: Runtime, specs: Sequence[TaskSpec]) -> list[NewTask]:
    """What a submit of ``specs`` would insert, for a caller that inserts it in a transaction
    of its own (with whatever else that transaction writes): each spec through its pipeline
    (checked, and held or admitted as at submit). InvalidInput names what a pipeline refuses.
    Dedup is the caller's: the insert skips a task a uniqueness rule refuses."""
    checked, kinds = _through_pipelines(rt, specs, single=True)
    paused = await _paused_types(rt)
    return [_record(rt, spec, kind, paused) for spec, kind in zip(checked, kinds, strict=True)]


async def _submit_chunk(
    rt: Runtime,
    specs: Sequence[TaskSpec],
    kinds: Sequence[str],
    chunk: list[int],
    results: list[SubmitResult | None],
) -> None:
    remaining = chunk
    paused = await _paused_types(rt)
    for _attempt in range(5):
        records = {i: _record(rt, specs[i], kinds[i], paused) for i in remaining}
        inserted = await rt.store.insert_tasks(list(records.values()))
        for i, record in records.items():
            if record.task.id in inserted:
                # The store numbers submissions; hand back the task as it is stored.
                task = record.task.evolve(seq=inserted[record.task.id])
                results[i] = SubmitResult(task, created=True)
        unmatched = [i for i in remaining if results[i] is None]
        if not unmatched:
            return
        given = [i for i in unmatched if specs[i].id is not None]
        by_id = {t.id: t for t in await rt.store.get_tasks([records[i].task.id for i in given])}
        for i in given:
            same = by_id.get(records[i].task.id)
            if same is not None and same.tenant == specs[i].tenant:
                results[i] = SubmitResult(same, created=False, matched_by="id")
        unmatched = [i for i in unmatched if results[i] is None]
        if not unmatched:
            return
        existing = await rt.store.find_existing(
            [
                DedupKey(
                    specs[i].tenant, specs[i].idempotency_key, specs[i].source, specs[i].source_id
                )
                for i in unmatched
            ]
        )
        by_key = {(t.tenant, t.idempotency_key): t for t in existing if t.idempotency_key}
        by_source = {
            (t.tenant, t.source, t.source_id): t
            for t in existing
            if t.source_id is not None and not t.terminal
        }
        for i in unmatched:
            spec = specs[i]
            if spec.idempotency_key and (spec.tenant, spec.idempotency_key) in by_key:
                task = by_key[(spec.tenant, spec.idempotency_key)]
                results[i] = SubmitResult(task, created=False, matched_by="idempotency_key")
            elif spec.source_id and (spec.tenant, spec.source, spec.source_id) in by_source:
                task = by_source[(spec.tenant, spec.source, spec.source_id)]
                results[i] = SubmitResult(task, created=False, matched_by="source")
        # What matched nothing conflicted with a task that has since finished: insert again.
        remaining = [i for i in unmatched if results[i] is None]
        if not remaining:
            return
    raise Conflict("could not settle a submit against concurrent changes; try again")
