"""The routes under ``/v1``, named as the CLI names its commands.

Each route declares its policy (:func:`~agentqueue.api.auth.guarded`), acts as the token's name
and within the token's tenant, and calls the service function the CLI reaches through
``Queue``. A task of another tenant is not found (404), never forbidden: nothing says it
exists.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from ..domain import access
from ..domain.access import Principal, in_scope
from ..domain.errors import InvalidInput, NotFound, StoreUnavailable
from ..domain.limits import JSONLimitError, parse_json
from ..domain.models import Event, Task
from ..domain.states import Action, TaskState
from ..ids import parse_task_id
from ..service import (
    actions,
    approvals,
    audit,
    deliveries,
    pausing,
    reads,
    threads,
    tokens,
    waiting,
)
from ..service import schedules as cron_schedules
from ..service import tools as tools_service
from ..service.runtime import Runtime
from ..spec import TaskSpec, field_problems
from . import models
from .auth import guarded, principal
from .watch import TaskWatcher

router = APIRouter(prefix="/v1")
Who = Annotated[Principal, Depends(principal)]

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": models.ProblemOut, "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 413, 422, 429, 503)
}
STREAM_KEEPALIVE_SECS = 15.0
STREAM_RETRY_SECS = 1.0
"""Pause of an event stream whose read met a database outage, before it reads again."""


def _rt(request: Request) -> Runtime:
    rt = request.app.state.runtime
    assert isinstance(rt, Runtime)
    return rt


def _id(value: str) -> UUID:
    return parse_task_id(value, "id")


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise InvalidInput("a JSON body is required", "body")
    return _parsed(raw)


def _parsed(raw: bytes) -> Any:
    """A body's JSON within the bounds of domain.limits (nested at most MAX_JSON_DEPTH deep,
    whole numbers of at most MAX_INT_DIGITS digits, finite numbers, UTF-8): what is read,
    checked, stored and written back recurses once per level, and Python refuses to read a
    whole number of more than 4,300 digits, so a body past them would end in a 500 at one step
    or another. NUL characters are left to the check that names the field."""
    try:
        return parse_json(raw, nul=False)
    except JSONLimitError as exc:
        raise InvalidInput(str(exc), "body") from None
    except ValueError:
        raise InvalidInput("not valid JSON", "body") from None


def _submitted_by(who: Principal, items: list[Any], single: bool) -> None:
    """The API never takes an actor from the body: ``requested_by``, the actor of the task's
    creation, is the token's name."""
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("requested_by", who.name) != who.name:
            field = "requested_by" if single else f"tasks[{index}].requested_by"
            raise InvalidInput(f"is the token's name ({who.name!r}) and cannot be set", field)


def shown(task: dict[str, Any]) -> dict[str, Any]:
    """A task's JSON as the API shows it: without its lease's lock_token, which is the
    capability of the worker holding it, not something a reader needs."""
    task["lock_token"] = None
    return task


def _task_json(task: Task) -> JSONResponse:
    return JSONResponse(shown(task.to_json()))


def _spec_body(model: type[Any]) -> dict[str, Any]:
    """Describe a body the route reads itself (so it is checked with the CLI's words)."""
    schema = _inlined(model.model_json_schema(by_alias=True))
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` put in place of their references: embedded in the OpenAPI
    document, ``#/$defs/...`` would point at the document's root, where nothing is."""
    defs = schema.pop("$defs", {})

    def walk(node: Any, within: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [walk(item, within) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in within:
                raise ValueError(f"{name} refers to itself; it cannot be inlined")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**walk(defs[name], within | {name}), **walk(rest, within)}
        return {key: walk(value, within) for key, value in node.items()}

    inlined: dict[str, Any] = walk(schema, frozenset())
    return inlined


def _declared(policy: access.Policy, body: type[Any] | None = None) -> dict[str, Any]:
    kwargs = guarded(policy)
    if body is not None:
        kwargs["openapi_extra"] = {**kwargs["openapi_extra"], **_spec_body(body)}
    return kwargs


# --- submitting ---------------------------------------------------------------------------


def _trace_context(request: Request, items: list[Any]) -> None:
    """The request's ``traceparent`` header (W3C trace context) for each task that does not
    name its own."""
    header = request.headers.get("traceparent")
    if header:
        for item in items:
            if isinstance(item, dict):
                item.setdefault("traceparent", header)


@router.post(
    "/tasks",
    summary="Submit a task",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": models.SubmitOut, "description": "Created"},
        200: {"model": models.SubmitOut, "description": "An existing task matched"},
        **ERRORS,
    },
    **_declared(access.SUBMITTER, body=TaskSpec),
)
async def submit(request: Request, who: Who) -> JSONResponse:
    """Submit one task (SPEC section 1 fields). A live task with the same (tenant, source,
    source_id), or any with the same idempotency_key, is returned instead (200,
    ``created`` false)."""
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise InvalidInput("must be an object of task fields", "body")
    _submitted_by(who, [body], single=True)
    _trace_context(request, [body])
    result = await request.app.state.submitter.submit(who, body)
    return JSONResponse(shown(result.to_json()), status_code=201 if result.created else 200)


@router.post(
    "/tasks/bulk",
    summary="Submit many tasks, all or nothing",
    response_model=None,
    responses={200: {"model": models.BulkOut}, **ERRORS},
    **_declared(access.SUBMITTER, body=models.BulkIn),
)
async def submit_many(request: Request, who: Who) -> JSONResponse:
    """Submit ``{"tasks": [...]}``: every item is checked first and one bad item fails the
    call naming ``tasks[i].field``; nothing is written then."""
    body = await _json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("tasks"), list):
        raise InvalidInput('must be {"tasks": [task, ...]}', "tasks")
    items = body["tasks"]
    extra = sorted(set(body) - {"tasks"})
    if extra:
        raise InvalidInput("unknown field", extra[0])
    if not items:
        raise InvalidInput("must list at least one task", "tasks")
    _submitted_by(who, items, single=False)
    _trace_context(request, items)
    results = await request.app.state.submitter.submit_many(who, items)
    return JSONResponse({"tasks": [shown(r.to_json()) for r in results]})


# --- reading ------------------------------------------------------------------------------


@router.get(
    "/tasks",
    summary="List tasks",
    response_model=None,
    responses={200: {"model": models.TaskPageOut}, **ERRORS},
    **guarded(access.SUBMITTER),
)
async def list_tasks(
    request: Request,
    who: Who,
    state: Annotated[list[str] | None, Query()] = None,
    task_type: Annotated[list[str] | None, Query()] = None,
    tenant: str | None = None,
    source: Annotated[list[str] | None, Query()] = None,
    source_id: str | None = None,
    assignee: str | None = None,
    label: Annotated[list[str] | None, Query()] = None,
    created_after: Annotated[str | None, Query(description="ISO 8601, inclusive")] = None,
    created_before: Annotated[str | None, Query(description="ISO 8601, exclusive")] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE)] = 50,
    cursor: str | None = None,
    after: Annotated[str | None, Query(description="a task id: the tasks after it")] = None,
) -> JSONResponse:
    """Tasks matching every filter given, newest first. ``next`` (and the ``Link`` header)
    pages on, as does ``after`` (the last task id seen); a repeated parameter
    (``state=queued&state=executing``) matches any of them."""
    page = await reads.list_tasks(
        _rt(request),
        tenant=in_scope(who.tenant, tenant),
        states=reads.parse_states(state),
        task_types=tuple(task_type or ()),
        sources=tuple(source or ()),
        source_id=source_id,
        assignee=assignee,
        labels=tuple(label or ()),
        created_after=created_after,
        created_before=created_before,
        limit=limit,
        cursor=cursor,
        after=after,
    )
    return _page(request, page)


def _page(request: Request, page: reads.TaskPage) -> JSONResponse:
    headers = {}
    if page.next_cursor is not None:
        url = request.url.include_query_params(cursor=page.next_cursor)
        headers["Link"] = f'<{url}>; rel="next"'
    body = page.to_json()
    body["items"] = [shown(item) for item in body["items"]]
    return JSONResponse(body, headers=headers)


@router.get(
    "/tasks/{task_id}",
    summary="Get a task, optionally waiting for it to end",
    response_model=None,
    responses={200: {"model": models.TaskDetailOut}, **ERRORS},
    **guarded(access.SUBMITTER),
)
async def get_task(
    request: Request,
    who: Who,
    task_id: str,
    wait: Annotated[float, Query(ge=0, description="Seconds to wait for a terminal state")] = 0,
) -> JSONResponse:
    """One task. With ``wait``, the answer comes when the task reaches a terminal state or
    the wait ends, whichever is first (at most ``[api] max_wait_secs``). A task that has not
    ended also carries ``waiting``: why it waits, as ``show`` says it."""
    rt = _rt(request)
    tid = _id(task_id)
    task = await reads.get(rt, tid, who.tenant)
    if wait <= 0 or task.terminal:
        return await _task_detail(rt, task)
    limit = min(wait, rt.settings.api.max_wait_secs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    watcher = request.app.state.watcher
    with watcher.watching(tid, task.event_seq) as changed:
        while not task.terminal:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                async with asyncio.timeout(left):
                    await changed.wait()
            except TimeoutError:
                break
            changed.clear()
            # The watcher's copy of the task, if it is further on than ours, spares a read; a
            # task gone is read (not found).
            latest = watcher.latest(tid)
            if latest is not None and latest.event_seq > task.event_seq:
                task = latest
            else:
                task = await reads.get(rt, tid, who.tenant)
    return await _task_detail(rt, task)


async def _task_detail(rt: Runtime, task: Task) -> JSONResponse:
    """A task as ``GET /tasks/{id}`` answers it: with ``waiting`` unless it has ended."""
    body = shown(task.to_json())
    reasons = await waiting.why(rt, task)
    if reasons:
        body["waiting"] = [r.to_json() for r in reasons]
    return JSONResponse(body)


SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event (OpenAPI 3.1 describes each event of a stream): "
    "``id`` is the event's seq, ``event`` its action, ``data`` the event as JSON.",
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/EventOut"},
        },
    },
    "required": ["id", "event", "data"],
}


@router.get(
    "/tasks/{task_id}/thread",
    summary="The thread a task is in: a mail and its replies",
    response_model=models.ThreadOut,
    responses=ERRORS,
    **guarded(access.SUBMITTER),
)
async def thread(request: Request, who: Who, task_id: str) -> dict[str, Any]:
    """The thread's first task, then every reply (``in_reply_to``), oldest first at each
    level."""
    found = await threads.thread(_rt(request), _id(task_id), who.tenant)
    return {"items": [t.to_json() for t in found]}


@router.get(
    "/tasks/{task_id}/events",
    summary="A task's audit events, or a stream of them",
    response_model=None,
    responses={
        200: {
            "model": list[models.EventOut],
            "content": {"text/event-stream": {"schema": SSE_EVENT}},
        },
        **ERRORS,
    },
    **guarded(access.SUBMITTER),
)
async def events(
    request: Request,
    who: Who,
    task_id: str,
    stream: Annotated[bool, Query(description="Stream as server-sent events")] = False,
) -> Response:
    """The task's events, oldest first. With ``stream=true`` (or ``Accept:
    text/event-stream``), server-sent events: every event so far, then each new one as it is
    written, ending after the task's terminal event."""
    rt = _rt(request)
    tid = _id(task_id)
    found = await reads.events(rt, tid, who.tenant)
    if not (stream or "text/event-stream" in request.headers.get("accept", "")):
        return JSONResponse([e.to_json() for e in found])
    task = await reads.get(rt, tid, who.tenant)
    return StreamingResponse(
        _event_stream(
            request.app.state.watcher, request.is_disconnected, rt, task, who.tenant, found
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _event_stream(
    watcher: TaskWatcher,
    disconnected: Callable[[], Awaitable[bool]],
    rt: Runtime,
    task: Task,
    tenant: str | None,
    first: list[Event],
) -> AsyncIterator[str]:
    """Every event so far (``first``, read before ``task``), then each new one, until the
    task's terminal event has been sent. The stream outlives a database outage (it reads again
    when the database is back) and ends quietly if the task is purged meanwhile, or, at a
    keep-alive, if its client has gone (``disconnected``)."""
    sent = 0
    batch = first
    # Watched from the last event read, not from the task's head: the task was read after its
    # events, and a move between the two reads (its end, say) must still wake the stream.
    read = max((e.seq for e in first), default=0)
    with watcher.watching(task.id, read) as changed:
        while True:
            for event in batch:
                if event.seq > sent:
                    sent = event.seq
                    data = json.dumps(event.to_json(), separators=(",", ":"))
                    yield f"id: {event.seq}\nevent: {event.action}\ndata: {data}\n\n"
            try:
                if batch and batch[-1].to_state.terminal and batch[-1].seq == sent:
                    task = await reads.get(rt, task.id, tenant)
                    if task.terminal and task.event_seq == sent:
                        return
                try:
                    async with asyncio.timeout(STREAM_KEEPALIVE_SECS):
                        await changed.wait()
                except TimeoutError:
                    if await disconnected():
                        return
                    yield ": keep-alive\n\n"
                    batch = []
                    continue
                changed.clear()
                batch = await reads.events(rt, task.id, tenant)
            except NotFound:
                return
            except StoreUnavailable:
                batch = []
                await asyncio.sleep(STREAM_RETRY_SECS)
                changed.set()  # read again: the events written meanwhile are not lost


@router.get(
    "/tasks/{task_id}/logs",
    summary="Captured output of a task's attempts",
    response_model=None,
    responses={200: {"model": list[models.LogOut]}, **ERRORS},
    **guarded(access.SUBMITTER),
)
async def logs(
    request: Request,
    who: Who,
    task_id: str,
    stream: Annotated[str | None, Query(pattern="^(stdout|stderr|log)$")] = None,
) -> JSONResponse:
    """Agent stdout/stderr and handler log lines, by attempt (``stream`` filters)."""
    rt = _rt(request)
    task = await reads.get(rt, _id(task_id), who.tenant)
    records = await rt.store.logs(task.id, who.tenant)
    return JSONResponse([r.to_json() for r in records if stream is None or r.stream == stream])


@router.get(
    "/tasks/{task_id}/prompt",
    summary="The prompt a command agent is given for a task",
    response_model=None,
    responses={200: {"model": models.PromptOut}, **ERRORS},
    **guarded(access.SUBMITTER),
)
async def prompt(request: Request, who: Who, task_id: str) -> JSONResponse:
    """The task's ``[prompts]`` template (by task type, else kind, else ``default``) rendered
    with the task as it is now; ``prompt`` is null when no template applies to it."""
    tid = _id(task_id)
    text = await reads.prompt(_rt(request), tid, who.tenant)
    return JSONResponse({"task_id": str(tid), "prompt": text})


@router.get(
    "/stats",
    summary="Task counts by state",
    response_model=None,
    responses={200: {"model": models.StatsOut}, **ERRORS},
    **guarded(access.SUBMITTER),
)
async def stats(request: Request, who: Who) -> JSONResponse:
    """How many tasks of the token's tenant (every tenant for an admin) are in each state."""
    return JSONResponse((await reads.stats(_rt(request), who.tenant)).to_json())


@router.get(
    "/agents",
    summary="Configured agents and their load",
    response_model=None,
    responses={200: {"model": list[models.AgentOut]}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def agents(request: Request) -> JSONResponse:
    """Each agent's capabilities and admitted work (over every tenant) against its cap."""
    return JSONResponse([a.to_json() for a in await reads.agent_loads(_rt(request))])


# --- people's actions ---------------------------------------------------------------------


async def _optional_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    return _parsed(raw)


def _validated(model: type[Any], value: Any) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise InvalidInput(field_problems(exc)) from None


@router.post(
    "/tasks/{task_id}/cancel",
    summary="Cancel a task",
    response_model=None,
    responses={200: {"model": models.TaskOut}, **ERRORS},
    **_declared(access.OPERATOR, body=models.ActionIn),
)
async def cancel(request: Request, who: Who, task_id: str) -> JSONResponse:
    """Cancel a task that has not ended; an executing one loses its lease at once."""
    return await _act_checked(request, who, Action.CANCEL, task_id, models.ActionIn)


async def _act_checked(
    request: Request, who: Principal, action: Action, task_id: str, model: type[Any]
) -> JSONResponse:
    body = _validated(model, await _optional_body(request))
    tid = _id(task_id)
    rt = _rt(request)
    extra = {"assignee": body.assignee} if getattr(body, "assignee", None) else {}
    done = await actions.act(
        rt, action, [tid], actor=who.name, reason=body.reason, tenant=who.tenant, **extra
    )
    return _task_json(done[0])


def _decision(approve: bool) -> Any:
    async def decide(request: Request, who: Who, task_id: str) -> JSONResponse:
        body = _validated(models.DecisionIn, await _optional_body(request))
        task = await approvals.decide_approval(
            _rt(request),
            _id(task_id),
            approve=approve,
            actor=who.name,
            reason=body.reason,
            tenant=who.tenant,
            approver=True,
        )
        return _task_json(task)

    verb = "approve" if approve else "reject"
    decide.__name__ = verb
    decide.__doc__ = (
        "Release a task a guardrail holds for approval (to pending)"
        if approve
        else "Cancel a task a guardrail holds for approval"
    ) + "; a guardrail that names its approvers takes only them. ``reason`` is required."
    return decide


for _approve in (True, False):
    _verb = "approve" if _approve else "reject"
    router.post(
        f"/tasks/{{task_id}}/{_verb}",
        summary=f"{_verb.capitalize()} a task held for approval",
        response_model=None,
        responses={200: {"model": models.TaskOut}, **ERRORS},
        **_declared(access.APPROVER, body=models.DecisionIn),
    )(_decision(_approve))


@router.post(
    "/tasks/{task_id}/tool-results/{call_id}",
    summary="Answer a tool call a task waits on",
    response_model=None,
    responses={200: {"model": models.TaskOut}, **ERRORS},
    **_declared(access.TOOL_RESULTS, body=models.ToolResultIn),
)
async def tool_result(request: Request, who: Who, task_id: str, call_id: str) -> JSONResponse:
    """Answer tool call ``call_id`` with ``{"result": ...}``; the task is queued again."""
    body = _validated(models.ToolResultIn, await _json_body(request))
    task = await tools_service.submit_tool_result(
        _rt(request), _id(task_id), call_id, body.result, actor=who.name, tenant=who.tenant
    )
    return _task_json(task)


# --- dead letters -------------------------------------------------------------------------


@router.get(
    "/dlq",
    summary="Dead letters",
    response_model=None,
    responses={200: {"model": models.TaskPageOut}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def dlq_list(
    request: Request,
    who: Who,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE)] = 50,
    cursor: str | None = None,
) -> JSONResponse:
    """Tasks in dead_letter or manual_review, newest first."""
    page = await reads.list_tasks(
        _rt(request),
        tenant=who.tenant,
        states=(TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW),
        limit=limit,
        cursor=cursor,
    )
    return _page(request, page)


def _dlq_action(action: Action, model: type[Any]) -> Any:
    async def dlq_act(request: Request, who: Who, task_id: str) -> JSONResponse:
        return await _act_checked(request, who, action, task_id, model)

    dlq_act.__name__ = f"dlq_{action.value}"
    return dlq_act


for _action, _model, _summary in (
    (Action.REVIEW, models.ActionIn, "Take a dead letter into manual review"),
    (Action.REQUEUE, models.RequeueIn, "Requeue a dead letter (optionally to a new assignee)"),
    (Action.ARCHIVE, models.ActionIn, "Archive a dead letter for good"),
):
    router.post(
        f"/dlq/{{task_id}}/{_action.value}",
        summary=_summary,
        description=_summary + ".",
        response_model=None,
        responses={200: {"model": models.TaskOut}, **ERRORS},
        **_declared(access.OPERATOR, body=_model),
    )(_dlq_action(_action, _model))


# --- pausing ------------------------------------------------------------------------------


@router.get(
    "/pause",
    summary="Paused task types",
    response_model=None,
    responses={200: {"model": list[models.PausedOut]}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def paused(request: Request) -> JSONResponse:
    """Every paused task type."""
    return JSONResponse([p.to_json() for p in await pausing.paused(_rt(request))])


@router.post(
    "/pause/{task_type}",
    summary="Pause a task type (every tenant)",
    response_model=None,
    responses={200: {"model": models.PausedOut}, **ERRORS},
    **_declared(access.EVERY_TENANT_OPERATOR, body=models.PauseIn),
)
async def pause(request: Request, who: Who, task_type: str) -> JSONResponse:
    """Stop admitting and claiming tasks of this type, in every tenant (so the token must
    cover every tenant)."""
    body = _validated(models.PauseIn, await _optional_body(request))
    found = await pausing.pause(_rt(request), task_type, actor=who.name, reason=body.reason)
    return JSONResponse(found.to_json())


@router.post(
    "/resume/{task_type}",
    summary="Resume a paused task type",
    response_model=None,
    responses={200: {"model": models.ResumedOut}, **ERRORS},
    **guarded(access.EVERY_TENANT_OPERATOR),
)
async def resume(request: Request, who: Who, task_type: str) -> JSONResponse:
    """Undo a pause; ``resumed`` is false if the type was not paused."""
    resumed = await pausing.resume(_rt(request), task_type, actor=who.name)
    return JSONResponse({"task_type": task_type, "resumed": resumed})


# --- schedules ----------------------------------------------------------------------------


@router.get(
    "/schedules",
    summary="Cron schedules",
    response_model=None,
    responses={200: {"model": list[models.ScheduleOut]}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def schedules_list(request: Request, who: Who, tenant: str | None = None) -> JSONResponse:
    """The token's tenant's schedules (an admin's: every tenant's, or ``tenant``'s)."""
    scope = in_scope(who.tenant, tenant)
    found = await cron_schedules.list_schedules(_rt(request), scope)
    return JSONResponse([s.to_json() for s in found])


@router.post(
    "/schedules",
    summary="Add a cron schedule",
    status_code=201,
    response_model=None,
    responses={201: {"model": models.ScheduleOut}, **ERRORS},
    **_declared(access.OPERATOR, body=models.ScheduleIn),
)
async def schedules_add(request: Request, who: Who, tenant: str | None = None) -> JSONResponse:
    """One task per slot of ``cron`` in ``tz``, exactly once even with several schedulers."""
    body = _validated(models.ScheduleIn, await _json_body(request))
    added = await cron_schedules.add_schedule(
        _rt(request),
        body.name,
        cron=body.cron,
        task=body.task,
        tz=body.tz,
        catch_up=body.catch_up,
        tenant=in_scope(who.tenant, tenant),
        actor=who.name,
    )
    return JSONResponse(added.to_json(), status_code=201)


@router.delete(
    "/schedules/{name}",
    summary="Remove a cron schedule",
    response_model=None,
    responses={200: {"model": models.ScheduleOut}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def schedules_rm(
    request: Request, who: Who, name: str, tenant: str | None = None
) -> JSONResponse:
    """Remove a schedule (tasks it already submitted stay)."""
    removed = await cron_schedules.remove_schedule(_rt(request), in_scope(who.tenant, tenant), name)
    return JSONResponse(removed.to_json())


# --- deliveries ---------------------------------------------------------------------------


@router.get(
    "/deliveries",
    summary="Deliveries (callbacks, GitHub replies, alerts)",
    response_model=None,
    responses={200: {"model": list[models.DeliveryOut]}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def deliveries_list(
    request: Request,
    who: Who,
    kind: str | None = None,
    state: str | None = None,
    task: str | None = None,
    limit: Annotated[int, Query(ge=1, le=deliveries.MAX_LIMIT)] = 50,
) -> JSONResponse:
    """The token's tenant's deliveries, newest first: of ``kind`` (callback, github_reply,
    alert), in ``state`` (pending, delivered, given_up), about ``task``."""
    found = await deliveries.list_deliveries(
        _rt(request),
        tenant=who.tenant,
        kind=kind,
        state=state,
        task_id=None if task is None else parse_task_id(task, "task"),
        limit=limit,
    )
    return JSONResponse([d.to_json() for d in found])


def _delivery_id(value: str) -> int:
    if not value.isdigit() or len(value) > 18:
        raise NotFound(f"no delivery {value}")
    return int(value)


@router.get(
    "/deliveries/{delivery_id}",
    summary="A delivery with every try",
    response_model=None,
    responses={200: {"model": models.DeliveryOut}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def deliveries_show(request: Request, who: Who, delivery_id: str) -> JSONResponse:
    """One delivery of the token's tenant, with every try (time, status code, duration,
    error)."""
    found = await deliveries.get_delivery(_rt(request), _delivery_id(delivery_id), who.tenant)
    return JSONResponse(found.to_json())


@router.post(
    "/deliveries/{delivery_id}/retry",
    summary="Retry a pending or given-up delivery now",
    response_model=None,
    responses={200: {"model": models.DeliveryOut}, **ERRORS},
    **guarded(access.OPERATOR),
)
async def deliveries_retry(request: Request, who: Who, delivery_id: str) -> JSONResponse:
    """Make a pending or given-up delivery due now (its tries kept); 409 if it was delivered or
    is being sent right now."""
    found = await deliveries.retry_delivery(_rt(request), _delivery_id(delivery_id), who.tenant)
    return JSONResponse(found.to_json())


# --- tokens and verify (admin) ------------------------------------------------------------


@router.get(
    "/tokens",
    summary="API tokens",
    response_model=None,
    responses={200: {"model": list[models.TokenOut]}, **ERRORS},
    **guarded(access.ADMIN),
)
async def tokens_list(request: Request) -> JSONResponse:
    """Every token, without its secret."""
    rt = _rt(request)
    now = rt.clock.now()
    return JSONResponse([t.to_json(now) for t in await tokens.list_tokens(rt)])


@router.post(
    "/tokens",
    summary="Make an API token",
    status_code=201,
    response_model=None,
    responses={201: {"model": models.NewTokenOut}, **ERRORS},
    **_declared(access.ADMIN, body=models.TokenIn),
)
async def tokens_create(request: Request, who: Who) -> JSONResponse:
    """A new token; its ``secret`` is in this answer and nowhere else, ever."""
    body = _validated(models.TokenIn, await _json_body(request))
    rt = _rt(request)
    made = await tokens.create_token(
        rt, name=body.name, role=body.role, tenant=body.tenant, expires=body.expires,
        actor=who.name,
    )  # fmt: skip
    return JSONResponse(
        made.to_json(rt.clock.now()), status_code=201, headers={"Cache-Control": "no-store"}
    )


@router.post(
    "/tokens/{name}/revoke",
    summary="Revoke an API token",
    response_model=None,
    responses={200: {"model": models.TokenOut}, **ERRORS},
    **guarded(access.ADMIN),
)
async def tokens_revoke(request: Request, name: str) -> JSONResponse:
    """Revoke a token: it stops working in every API process within ``[api]
    token_cache_secs``."""
    rt = _rt(request)
    revoked = await tokens.revoke_token(rt, name)
    request.app.state.auth.forget(revoked.prefix)
    return JSONResponse(revoked.to_json(rt.clock.now()))


@router.get(
    "/verify",
    summary="Check every audit chain",
    response_model=None,
    responses={200: {"model": models.VerifyOut}, **ERRORS},
    **guarded(access.ADMIN),
)
async def verify(request: Request) -> JSONResponse:
    """Walk every task's audit chain; ``ok`` false and ``breaks`` name what does not hold."""
    return JSONResponse((await audit.verify(_rt(request))).to_json())
