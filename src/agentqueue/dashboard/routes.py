"""The dashboard's pages and actions: a thin shell over the service operations the API routes
call. Every route declares its policy (as the API's do); reading pages work without
JavaScript; every form post carries the session's CSRF token."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode
from uuid import UUID

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, select_autoescape

from ..api.auth import POLICY_KEY
from ..api.problems import from_error, unexpected
from ..api.routes import shown
from ..domain import access
from ..domain.access import Policy, Principal, in_scope
from ..domain.errors import AgentQueueError, InvalidInput, NotFound, RateLimited
from ..domain.states import HOLD_APPROVAL, LIVE_STATES, Action, TaskState
from ..ids import parse_task_id
from ..service import actions, approvals, audit, overview, pausing, reads
from ..service import schedules as cron_schedules
from ..service.runtime import Runtime
from . import charts
from .session import (
    COOKIE,
    CSRF_FIELD,
    LOGIN_COOKIE,
    SESSION_SECS,
    LoginNeeded,
    Refused,
    acting,
    first,
    form,
    new_login_nonce,
    viewer,
)


class DashboardRoute(APIRoute):
    """A dashboard route: what goes wrong is answered as a page (or, without a working
    session, by the login page), never as the API's JSON problem."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, its errors turned into pages."""
        handle = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await handle(request)
            except LoginNeeded as exc:
                return await error_page(request, exc)
            except AgentQueueError as exc:
                if unexpected(exc):
                    raise
                return await error_page(request, exc)

        return handler


router = APIRouter(include_in_schema=False, route_class=DashboardRoute)

READ = access.SUBMITTER
"""Reading pages: any role that reads tasks (its tenant's only when the token has one)."""

PAGE_SIZE = 50
REFRESH_SECS = 15

_env = Environment(
    loader=PackageLoader("agentqueue.dashboard", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "—"
    secs = ((now or datetime.now(UTC)) - value).total_seconds()
    if secs < 0:
        return f"in {_span(-secs)}"
    return f"{_span(secs)} ago"


def _span(secs: float) -> str:
    if secs < 90:
        return f"{secs:.0f} s"
    if secs < 5400:
        return f"{secs / 60:.0f} min"
    if secs < 172800:
        return f"{secs / 3600:.0f} h"
    return f"{secs / 86400:.0f} d"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


_env.filters["when"] = _when
_env.filters["ago"] = _ago
_env.filters["pretty"] = _pretty


def declared(policy: Policy) -> dict[str, Any]:
    """Route keyword arguments recording ``policy`` where ``check_policies`` reads it. The
    dashboard enforces it itself (:func:`session.viewer`), from the session cookie."""
    return {"openapi_extra": {POLICY_KEY: policy.to_json()}}


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def abilities(who: Principal) -> dict[str, bool]:
    """What the pages offer: the same policies the API's routes for these actions declare."""
    return {
        "operate": access.OPERATOR.allows(who),
        "approve": access.APPROVER.allows(who),
        "pause": access.EVERY_TENANT_OPERATOR.allows(who),
    }


def render(request: Request, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    """A page, with the session's principal, abilities and CSRF token when there is one."""
    who: Principal | None = getattr(request.state, "principal", None)
    context = {
        "who": who,
        "can": abilities(who) if who else {},
        "csrf": getattr(request.state, "csrf", ""),
        "csrf_field": CSRF_FIELD,
        "notice": request.query_params.get("notice", ""),
        "path": request.url.path,
        "now": datetime.now(UTC),
        **values,
    }
    html = _env.get_template(template).render(context)
    return HTMLResponse(html, status_code=status_code, headers=_NO_STORE)


_NO_STORE = {"Cache-Control": "no-store", "X-Frame-Options": "DENY"}


def local(path: str) -> str:
    """``path`` if it is a path on this server, else ``/`` (no redirect leaves the site:
    ``//host`` and ``/\\host`` are other sites to a browser)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def back(to: str, notice: str) -> RedirectResponse:
    """See other: back to ``to`` (a path of this dashboard) with a notice shown at the top."""
    to = local(to)
    sep = "&" if "?" in to else "?"
    return RedirectResponse(f"{to}{sep}{urlencode({'notice': notice})}", status_code=303)


Handler = Callable[..., Awaitable[Response]]


async def error_page(request: Request, exc: Exception) -> Response:
    """An error met by a dashboard page, as a page (a form post's refusal included)."""
    if isinstance(exc, LoginNeeded):
        target = quote(request.url.path if request.method == "GET" else "/")
        query = f"?next={target}"
        if exc.message:
            query += "&" + urlencode({"notice": exc.message})
        return RedirectResponse(f"/login{query}", status_code=303)
    assert isinstance(exc, AgentQueueError)
    status = 429 if isinstance(exc, RateLimited) else from_error(exc).status_code
    message = "the database answered with an error" if unexpected(exc) else str(exc)
    return render(request, "error.html", status_code=status, status=status, message=message)


# --- assets and the session -------------------------------------------------------------

_ASSETS = {"dashboard.css": "text/css", "refresh.js": "text/javascript"}


@router.get("/static/{name}", **declared(access.PUBLIC))
async def asset(name: str) -> Response:
    """The stylesheet and the refresh script, shipped in the package."""
    if name not in _ASSETS:
        raise NotFound(f"no asset {name!r}")
    body = resources.files("agentqueue.dashboard").joinpath("static", name).read_bytes()
    return Response(body, media_type=_ASSETS[name], headers={"Cache-Control": "max-age=300"})


@router.get("/login", **declared(access.PUBLIC))
async def login_page(request: Request) -> Response:
    """The login form (a fresh nonce in the form and in a cookie, against login CSRF)."""
    nonce = new_login_nonce()
    response = render(
        request, "login.html", nonce=nonce, next=request.query_params.get("next", "/")
    )
    _set_cookie(request, response, LOGIN_COOKIE, nonce, 600)
    return response


@router.post("/login", **declared(access.PUBLIC))
async def login(request: Request) -> Response:
    """Check the token with the API's authenticator and start the session."""
    fields = await form(request)
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or first(fields, CSRF_FIELD) != nonce:
        return render(
            request,
            "login.html",
            status_code=403,
            nonce=nonce or new_login_nonce(),
            next="/",
            error="the login form expired or was not this server's; try again",
        )
    secret = first(fields, "token").strip()
    target = local(first(fields, "next", "/"))
    try:
        await request.app.state.auth.principal(secret)
    except AgentQueueError:
        # Never echo the token: the error says only that it did not work.
        return render(
            request,
            "login.html",
            status_code=401,
            nonce=nonce,
            next=target,
            error="that token does not work here (unknown, revoked or expired)",
        )
    response = RedirectResponse(target, status_code=303)
    _set_cookie(request, response, COOKIE, secret, SESSION_SECS)
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


@router.post("/logout", **declared(access.ANY_TOKEN))
async def logout(request: Request) -> Response:
    """End the session (the token itself stays valid for the API)."""
    await acting(request, access.ANY_TOKEN)
    response = RedirectResponse("/login?notice=logged+out", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


# --- overview -----------------------------------------------------------------------------


@router.get("/", **declared(READ))
async def overview_page(request: Request) -> Response:
    """Depth by state, throughput and latency charts, agents, workers, leader, outbox, pauses."""
    who = await viewer(request, READ)
    seen = await overview.overview(_rt(request), who.tenant)
    counts = [(s.value, n) for s, n in seen.depth.items()]
    return render(
        request,
        "overview.html",
        seen=seen,
        depth=charts.depth_bars(counts),
        ended=charts.depth_bars(list(seen.ended.items())),
        windows=[(w, *charts.window_charts(w)) for w in seen.windows],
        whole_queue=who.every_tenant,
        refresh=REFRESH_SECS,
    )


# --- tasks --------------------------------------------------------------------------------

_FILTERS = ("state", "task_type", "tenant", "agent", "source_id", "q")


@router.get("/tasks", **declared(READ))
async def tasks_page(request: Request) -> Response:
    """Tasks, newest first, filtered; 50 a page, the next page after the last one shown."""
    who = await viewer(request, READ)
    q = request.query_params
    chosen = {name: q.get(name, "").strip() for name in _FILTERS}
    page = await reads.list_tasks(
        _rt(request),
        tenant=in_scope(who.tenant, chosen["tenant"] or None),
        states=reads.parse_states(chosen["state"] or None),
        task_types=reads.names(chosen["task_type"] or None),
        agent=chosen["agent"] or None,
        source_id=chosen["source_id"] or None,
        text=chosen["q"] or None,
        limit=PAGE_SIZE,
        after=q.get("after") or None,
    )
    kept = {k: v for k, v in chosen.items() if v}
    next_url = None
    if page.next_cursor is not None and page.items:
        next_url = "/tasks?" + urlencode({**kept, "after": str(page.items[-1].id)})
    return render(
        request,
        "tasks.html",
        tasks=page.items,
        chosen=chosen,
        states=[s.value for s in TaskState],
        next_url=next_url,
        first_url="/tasks?" + urlencode(kept) if q.get("after") else None,
        refresh=REFRESH_SECS,
    )


@router.get("/tasks/{task_id}", **declared(READ))
async def task_page(request: Request, task_id: str) -> Response:
    """One task: fields, events with the chain's status, checkpoint, tool calls, logs per
    attempt, dependencies as a graph, and the actions its state and the role allow."""
    who = await viewer(request, READ)
    rt = _rt(request)
    task = await reads.get(rt, parse_task_id(task_id, "task_id"), who.tenant)
    events = await reads.events(rt, task.id, who.tenant)
    broken = audit.verify_task(task, events)
    logs = await rt.store.logs(task.id, who.tenant)
    attempts: dict[int, list[Any]] = {}
    for record in logs:
        attempts.setdefault(record.attempt, []).append(record)
    upstream = await rt.store.get_tasks(list(task.depends_on), who.tenant)
    missing = sorted(set(map(str, task.depends_on)) - {str(t.id) for t in upstream})
    graph = charts.dependency_graph(task, upstream, missing) if task.depends_on else None
    fields = shown(task.to_json())
    for name in ("checkpoint", "tool_calls", "payload", "result"):
        fields.pop(name, None)
    return render(
        request,
        "task.html",
        task=task,
        fields=fields,
        events=events,
        broken=broken,
        attempts=sorted(attempts.items()),
        graph=graph,
        held=task.state is TaskState.BLOCKED and task.hold == HOLD_APPROVAL,
        dead=task.state in (TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW),
        live=task.state in LIVE_STATES,
    )


@router.post("/tasks/{task_id}/cancel", **declared(access.OPERATOR))
async def cancel(request: Request, task_id: str) -> Response:
    """Cancel the task (the service's cancel, as ``POST /v1/tasks/{id}/cancel``)."""
    who, fields = await acting(request, access.OPERATOR)
    tid = parse_task_id(task_id, "task_id")
    to = f"/tasks/{tid}"
    try:
        await actions.act(
            _rt(request),
            Action.CANCEL,
            [tid],
            actor=who.name,
            reason=first(fields, "reason"),
            tenant=who.tenant,
        )
    except AgentQueueError as exc:
        return _refusal(exc, to)
    return back(to, "cancelled")


def _refusal(exc: AgentQueueError, to: str) -> Response:
    if unexpected(exc) or isinstance(exc, Refused):
        raise exc
    return back(to, f"not done: {exc}")


# --- dead letters -------------------------------------------------------------------------

DLQ_ACTIONS = {"review": Action.REVIEW, "requeue": Action.REQUEUE, "archive": Action.ARCHIVE}


@router.get("/dead-letters", **declared(access.OPERATOR))
async def dead_letters_page(request: Request) -> Response:
    """Dead letters and those in manual review, newest first, with their last error."""
    who = await viewer(request, access.OPERATOR)
    page = await reads.list_tasks(
        _rt(request),
        tenant=who.tenant,
        states=(TaskState.DEAD_LETTER, TaskState.MANUAL_REVIEW),
        limit=PAGE_SIZE,
        after=request.query_params.get("after") or None,
    )
    next_url = None
    if page.next_cursor is not None and page.items:
        next_url = "/dead-letters?" + urlencode({"after": str(page.items[-1].id)})
    return render(request, "dead_letters.html", tasks=page.items, next_url=next_url)


@router.post("/dead-letters", **declared(access.OPERATOR))
async def dead_letters_act(request: Request) -> Response:
    """Review, requeue or archive every ticked dead letter at once (all or nothing), through
    the service's ``act`` (as ``POST /v1/dlq/{id}/...``)."""
    who, fields = await acting(request, access.OPERATOR)
    to = first(fields, "back", "/dead-letters")
    name = first(fields, "action")
    try:
        action = DLQ_ACTIONS.get(name)
        if action is None:
            raise InvalidInput("must be review, requeue or archive", "action")
        ids = _ids(fields.get("task_id", []))
        done = await actions.act(
            _rt(request),
            action,
            ids,
            actor=who.name,
            reason=first(fields, "reason"),
            tenant=who.tenant,
            assignee=first(fields, "assignee").strip() or None,
        )
    except AgentQueueError as exc:
        return _refusal(exc, to)
    return back(to, f"{name}: {len(done)} task{'s' if len(done) != 1 else ''}")


def _ids(values: Sequence[str]) -> list[UUID]:
    if not values:
        raise InvalidInput("tick at least one task", "task_id")
    return [parse_task_id(v, "task_id") for v in values]


# --- approvals ----------------------------------------------------------------------------


@router.get("/approvals", **declared(READ))
async def approvals_page(request: Request) -> Response:
    """Tasks a guardrail holds for approval; approve or reject for an approver."""
    who = await viewer(request, READ)
    page = await reads.list_tasks(
        _rt(request), tenant=who.tenant, states=(TaskState.BLOCKED,), limit=reads.MAX_PAGE
    )
    held = [t for t in page.items if t.hold == HOLD_APPROVAL]
    return render(request, "approvals.html", tasks=held)


@router.post("/approvals/{task_id}", **declared(access.APPROVER))
async def decide(request: Request, task_id: str) -> Response:
    """Approve or reject one held task with a reason, through the service's
    ``decide_approval`` (as ``POST /v1/tasks/{id}/approve``)."""
    who, fields = await acting(request, access.APPROVER)
    to = first(fields, "back", "/approvals")
    decision = first(fields, "decision")
    try:
        if decision not in ("approve", "reject"):
            raise InvalidInput("must be approve or reject", "decision")
        await approvals.decide_approval(
            _rt(request),
            parse_task_id(task_id, "task_id"),
            approve=decision == "approve",
            actor=who.name,
            reason=first(fields, "reason"),
            tenant=who.tenant,
            approver=True,
        )
    except AgentQueueError as exc:
        return _refusal(exc, to)
    return back(to, f"{decision}d")


# --- schedules ----------------------------------------------------------------------------


@router.get("/schedules", **declared(access.OPERATOR))
async def schedules_page(request: Request) -> Response:
    """The cron schedules of the token's tenant (an admin's: every tenant's)."""
    who = await viewer(request, access.OPERATOR)
    found = await cron_schedules.list_schedules(_rt(request), who.tenant)
    return render(request, "schedules.html", schedules=found)


@router.post("/schedules/remove", **declared(access.OPERATOR))
async def schedules_remove(request: Request) -> Response:
    """Remove a schedule (as ``DELETE /v1/schedules/{name}``)."""
    who, fields = await acting(request, access.OPERATOR)
    name = first(fields, "name")
    try:
        tenant = in_scope(who.tenant, first(fields, "tenant") or None)
        await cron_schedules.remove_schedule(_rt(request), tenant, name)
    except AgentQueueError as exc:
        return _refusal(exc, "/schedules")
    return back("/schedules", f"removed schedule {name}")


# --- pausing ------------------------------------------------------------------------------


@router.get("/paused", **declared(READ))
async def paused_page(request: Request) -> Response:
    """Paused task types; pause and resume for a token covering every tenant."""
    await viewer(request, READ)
    return render(request, "paused.html", paused=await pausing.paused(_rt(request)))


@router.post("/paused", **declared(access.EVERY_TENANT_OPERATOR))
async def pause_or_resume(request: Request) -> Response:
    """Pause or resume a task type (as ``POST /v1/pause/{type}`` and ``/v1/resume/{type}``)."""
    who, fields = await acting(request, access.EVERY_TENANT_OPERATOR)
    task_type = first(fields, "task_type").strip()
    verb = first(fields, "action")
    rt = _rt(request)
    try:
        if verb == "pause":
            await pausing.pause(rt, task_type, actor=who.name, reason=first(fields, "reason"))
        elif verb == "resume":
            await pausing.resume(rt, task_type, actor=who.name)
        else:
            raise InvalidInput("must be pause or resume", "action")
    except AgentQueueError as exc:
        return _refusal(exc, "/paused")
    return back("/paused", f"{verb}d {task_type}")


def install(app: FastAPI) -> None:
    """Serve the dashboard from ``app``: its routes, and its errors as pages."""
    app.include_router(router)
