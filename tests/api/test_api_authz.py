"""Who may call what (R20), generated from the app's own route table.

Every route the app serves under ``/v1`` is found by walking the app (included routers too),
its declared policy is read back from the route, and a real request is sent to a live server
for every role, for a task (or schedule) of the caller's own tenant and of another tenant, and
for every kind of bad credential. The expected status is computed from the declared policy
(``Policy.allows``) and the tenant rule (another tenant's task is 404, never 403): a policy
made looser or stricter than declared, a route that forgets its tenant, or a new route without
a request recipe below all fail here.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import task_states
from app_routes import build_app, v1_routes
from fastapi import APIRouter
from fastapi.routing import APIRoute
from http_server import ApiServer
from task_states import fresh_name

from agentqueue import AsyncQueue
from agentqueue.api.app import UndeclaredPolicy, check_policies
from agentqueue.api.auth import route_policy
from agentqueue.api.problems import AUTH_CHALLENGE, SIGNATURE_CHALLENGE
from agentqueue.domain import access
from agentqueue.domain.access import Policy, Principal, Role
from agentqueue.domain.deliveries import CALLBACK_KIND, Delivery
from agentqueue.store.base import DeliveryFilter

OWN, OTHER = "alpha", "beta"
ROLES = [Role.SUBMITTER, Role.APPROVER, Role.OPERATOR, Role.ADMIN, Role.WORKER]
PAUSABLE = "matrix-paused"
"""The task type the matrix pauses and resumes (no task has it)."""


APP = build_app()
ROUTES = v1_routes(APP)


def policy_of(key: tuple[str, str]) -> Policy:
    """The route's declared policy; fails the test for a route that declares none."""
    route = ROUTES[key]
    assert isinstance(route, APIRoute), f"{key[0]} {key[1]} is not an API route with a policy"
    policy = route_policy(route)
    assert policy is not None, f"{key[0]} {key[1]} declares no policy"
    assert not policy.public, f"{key[0]} {key[1]} answers without a token"
    return policy


def success_status(key: tuple[str, str]) -> int:
    """The status the route answers when it does what it was asked."""
    route = ROUTES[key]
    return getattr(route, "status_code", None) or 200


# --- what each route needs to succeed ---------------------------------------------------


@dataclass
class Call:
    """The parts of one request to a route."""

    path: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None


class Fixtures:
    """Things routes act on, made on the server's database from this process: every call
    gets its own task (or schedule, or token) in the state the route needs."""

    def __init__(self, queue: AsyncQueue) -> None:
        self.q = queue

    async def task(self, tenant: str) -> uuid.UUID:
        """A new queued task of ``tenant``."""
        return (await task_states.queued(self.q, tenant)).id

    async def blocked(self, tenant: str) -> uuid.UUID:
        """A task held for approval."""
        return (await task_states.blocked(self.q, tenant)).id

    async def dead(self, tenant: str) -> uuid.UUID:
        """A dead letter."""
        return (await task_states.dead(self.q, tenant)).id

    async def waiting(self, tenant: str) -> tuple[uuid.UUID, str]:
        """A task waiting on a tool call, and the call's id."""
        return (await task_states.waiting(self.q, tenant)).id, task_states.CALL_ID

    async def schedule(self, tenant: str) -> str:
        """A cron schedule of ``tenant``."""
        name = fresh_name("sched")
        task = {"title": "nightly", "task_type": "docs"}
        await self.q.add_schedule(name, cron="0 2 * * *", task=task, tenant=tenant)
        return name

    async def delivery(self, tenant: str) -> int:
        """A pending callback delivery about a task of ``tenant``."""
        task = await task_states.queued(self.q, tenant)
        item = Delivery(
            CALLBACK_KIND,
            task.id,
            tenant,
            task.event_seq,
            "https://hooks.example/cb",
            {},
            task.created_at,
        )
        async with self.q.store.transaction() as tx:
            await tx.enqueue_outbox([item])
        [found] = await self.q.store.list_deliveries(DeliveryFilter(task_id=task.id))
        return found.id

    async def token(self) -> str:
        """A live token's name."""
        name = fresh_name("tok")
        await self.q.create_token(name, role="submitter", tenant=OWN)
        return name


Build = Callable[[Fixtures, str, Principal], Awaitable[Call]]


@dataclass(frozen=True)
class Recipe:
    """How to make a request to one route that succeeds for a caller it lets in; ``owned``:
    it acts on something of the target tenant, so another tenant's caller gets 404."""

    build: Build
    owned: bool = False


def _task_route(body: Any = None) -> Recipe:
    async def build(fx: Fixtures, tenant: str, _who: Principal) -> Call:
        return Call({"task_id": str(await fx.task(tenant))}, body=body)

    return Recipe(build, owned=True)


def _state_route(make: str, body: Any) -> Recipe:
    async def build(fx: Fixtures, tenant: str, _who: Principal) -> Call:
        task_id = await getattr(fx, make)(tenant)
        return Call({"task_id": str(task_id)}, body=body)

    return Recipe(build, owned=True)


def _plain(body: Any = None, params: dict[str, str] | None = None) -> Recipe:
    async def build(_fx: Fixtures, _tenant: str, _who: Principal) -> Call:
        return Call(params=dict(params or {}), body=body)

    return Recipe(build)


async def _submit(fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    return Call(body={"title": "matrix", "task_type": "docs", "source_id": fresh_name("src")})


async def _bulk(fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    item = {"title": "matrix", "task_type": "docs", "source_id": fresh_name("src")}
    return Call(body={"tasks": [item]})


async def _tool_result(fx: Fixtures, tenant: str, _who: Principal) -> Call:
    task_id, call_id = await fx.waiting(tenant)
    return Call({"task_id": str(task_id), "call_id": call_id}, body={"result": {"hits": 1}})


async def _pause(_fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    return Call({"task_type": PAUSABLE}, body={"reason": "matrix"})


async def _resume(_fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    return Call({"task_type": PAUSABLE})


async def _schedule_add(fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    body = {
        "name": fresh_name("sched"),
        "cron": "0 3 * * *",
        "task": {"title": "t", "task_type": "docs"},
    }
    return Call(body=body)


async def _schedule_rm(fx: Fixtures, tenant: str, who: Principal) -> Call:
    name = await fx.schedule(tenant)
    # A token covering every tenant says which tenant's schedule it means.
    return Call({"name": name}, params={"tenant": tenant} if who.every_tenant else {})


def _delivery_route() -> Recipe:
    async def build(fx: Fixtures, tenant: str, _who: Principal) -> Call:
        return Call({"delivery_id": str(await fx.delivery(tenant))})

    return Recipe(build, owned=True)


async def _token_add(fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    return Call(body={"name": fresh_name("tok"), "role": "submitter", "tenant": OWN})


async def _token_revoke(fx: Fixtures, _tenant: str, _who: Principal) -> Call:
    return Call({"name": await fx.token()})


REASON = {"reason": "matrix"}
SUBMITTER, APPROVER, OPERATOR = access.SUBMITTER, access.APPROVER, access.OPERATOR
ADMIN, ANY_TOKEN, TOOLS = access.ADMIN, access.ANY_TOKEN, access.TOOL_RESULTS
EVERY_TENANT = access.EVERY_TENANT_OPERATOR
RECIPES: dict[tuple[str, str], tuple[Policy, Recipe]] = {
    ("POST", "/v1/tasks"): (SUBMITTER, Recipe(_submit)),
    ("POST", "/v1/tasks/bulk"): (SUBMITTER, Recipe(_bulk)),
    ("GET", "/v1/tasks"): (SUBMITTER, _plain()),
    ("GET", "/v1/tasks/{task_id}"): (SUBMITTER, _task_route()),
    ("GET", "/v1/tasks/{task_id}/events"): (SUBMITTER, _task_route()),
    ("GET", "/v1/tasks/{task_id}/logs"): (SUBMITTER, _task_route()),
    ("GET", "/v1/tasks/{task_id}/prompt"): (SUBMITTER, _task_route()),
    ("GET", "/v1/tasks/{task_id}/thread"): (SUBMITTER, _task_route()),
    ("GET", "/v1/stats"): (SUBMITTER, _plain()),
    ("GET", "/v1/agents"): (OPERATOR, _plain()),
    ("POST", "/v1/tasks/{task_id}/cancel"): (OPERATOR, _task_route(REASON)),
    ("POST", "/v1/tasks/{task_id}/approve"): (APPROVER, _state_route("blocked", {"reason": "ok"})),
    ("POST", "/v1/tasks/{task_id}/reject"): (APPROVER, _state_route("blocked", {"reason": "no"})),
    ("POST", "/v1/tasks/{task_id}/tool-results/{call_id}"): (TOOLS, Recipe(_tool_result, True)),
    ("GET", "/v1/dlq"): (OPERATOR, _plain()),
    ("POST", "/v1/dlq/{task_id}/review"): (OPERATOR, _state_route("dead", REASON)),
    ("POST", "/v1/dlq/{task_id}/requeue"): (OPERATOR, _state_route("dead", REASON)),
    ("POST", "/v1/dlq/{task_id}/archive"): (OPERATOR, _state_route("dead", REASON)),
    ("GET", "/v1/pause"): (OPERATOR, _plain()),
    ("POST", "/v1/pause/{task_type}"): (EVERY_TENANT, Recipe(_pause)),
    ("POST", "/v1/resume/{task_type}"): (EVERY_TENANT, Recipe(_resume)),
    ("GET", "/v1/schedules"): (OPERATOR, _plain()),
    ("POST", "/v1/schedules"): (OPERATOR, Recipe(_schedule_add)),
    ("DELETE", "/v1/schedules/{name}"): (OPERATOR, Recipe(_schedule_rm, owned=True)),
    ("GET", "/v1/deliveries"): (OPERATOR, _plain()),
    ("GET", "/v1/deliveries/{delivery_id}"): (OPERATOR, _delivery_route()),
    ("POST", "/v1/deliveries/{delivery_id}/retry"): (OPERATOR, _delivery_route()),
    ("GET", "/v1/tokens"): (ADMIN, _plain()),
    ("POST", "/v1/tokens"): (ADMIN, Recipe(_token_add)),
    ("POST", "/v1/tokens/{name}/revoke"): (ADMIN, Recipe(_token_revoke)),
    ("GET", "/v1/verify"): (ADMIN, _plain()),
    ("GET", "/v1/openapi.json"): (ANY_TOKEN, _plain()),
    ("GET", "/v1/docs"): (ANY_TOKEN, _plain()),
    # Signed, not token-bearing: every token is refused 401 for want of a signature (the
    # signature itself is tested in test_intake_github).
    ("POST", "/v1/intake/github"): (access.GITHUB_WEBHOOK, _plain()),
}
"""Each route's policy as this test expects it (a change to a route's policy is a change to
who may do what, so it shows here), and how to call it successfully."""


def expected_status(key: tuple[str, str], who: Principal, owned: bool, target: str) -> int:
    """What the route must answer ``who`` acting on something of tenant ``target``."""
    if policy_of(key).signed is not None:
        return 401  # a token is no signature
    if not policy_of(key).allows(who):
        return 403
    if owned and not who.every_tenant and who.tenant != target:
        return 404  # another tenant's: nothing says it exists
    return success_status(key)


def _id(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}"


# --- the callers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """A token of one role and what it stands for."""

    who: Principal
    secret: str


@pytest.fixture(scope="module")
def callers(server: ApiServer) -> list[Caller]:
    """One token of each role: the admin covers every tenant, the others are bound to OWN."""

    async def make() -> list[Caller]:
        out = []
        for role in ROLES:
            tenant = None if role is Role.ADMIN else OWN
            name = f"matrix-{role.value}"
            secret = await server.token(name, role.value, tenant)
            out.append(Caller(Principal(name, role, tenant), secret))
        return out

    return asyncio.run(make())


@pytest.fixture(scope="module")
def bad_credentials(server: ApiServer) -> dict[str, dict[str, str]]:
    """Authorization headers that must all be refused with 401, by what is wrong with them."""
    revoked = server.cli_token("matrix-revoked", "admin")
    server.cli("tokens", "revoke", "matrix-revoked")
    expired = asyncio.run(server.expired_token("matrix-expired"))
    known_prefix = server.admin_secret[: len("aq_") + 12]  # the key may hold "_" itself
    return {
        "none": {},
        "bare scheme": {"Authorization": "Bearer"},
        "other scheme": {"Authorization": f"Basic {server.admin_secret}"},
        "not a token": {"Authorization": "Bearer hello"},
        "unknown": {"Authorization": f"Bearer aq_{'x' * 12}_{secrets.token_urlsafe(32)}"},
        "wrong key": {"Authorization": f"Bearer {known_prefix}_{secrets.token_urlsafe(32)}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "expired": {"Authorization": f"Bearer {expired}"},
    }


async def _send(
    http: httpx.AsyncClient, key: tuple[str, str], call: Call, headers: dict[str, str]
) -> httpx.Response:
    method, path = key
    url = path.format(**call.path)
    kwargs: dict[str, Any] = {"params": call.params, "headers": headers}
    if call.body is not None:
        kwargs["json"] = call.body
    return await http.request(method, url, **kwargs)


# --- the tests ----------------------------------------------------------------------------


def test_every_route_under_v1_declares_a_policy_and_has_a_recipe() -> None:
    """The matrix covers the whole route table: a new route without a policy or without a
    recipe here fails, a recipe for a route that is gone fails too, and so does a route whose
    declared policy is not the one expected here."""
    assert ROUTES, "no route under /v1 found"
    for key in ROUTES:
        policy_of(key)
    loose = [
        f"{_id(key)} declares {policy_of(key).describe()}, expected {RECIPES[key][0].describe()}"
        for key in sorted(set(ROUTES) & set(RECIPES))
        if policy_of(key) != RECIPES[key][0]
    ]
    assert not loose, "policies changed:\n" + "\n".join(loose)
    missing = sorted(set(ROUTES) - set(RECIPES))
    assert not missing, f"routes without a request recipe in RECIPES: {missing}"
    stale = sorted(set(RECIPES) - set(ROUTES))
    assert not stale, f"recipes for routes the app does not serve: {stale}"


def test_the_route_walk_sees_every_operation_of_the_openapi_document() -> None:
    """The walk above finds what FastAPI documents (so it cannot miss included routers)."""
    documented = {
        (method.upper(), path)
        for path, operations in APP.openapi()["paths"].items()
        for method in operations
        if path.startswith("/v1/")
    }
    assert documented, "the OpenAPI document lists no /v1 operation"
    assert documented <= set(ROUTES)


def test_check_policies_refuses_a_route_without_a_policy() -> None:
    """The app will not start with an undeclared route, added to the app or to a router."""
    check_policies(build_app())
    direct = build_app()
    direct.add_api_route("/v1/loose", lambda: {}, methods=["GET"])
    with pytest.raises(UndeclaredPolicy, match="/v1/loose"):
        check_policies(direct)
    included = build_app()
    router = APIRouter(prefix="/v1")
    router.add_api_route("/sneaky", lambda: {}, methods=["POST"])
    included.include_router(router)
    with pytest.raises(UndeclaredPolicy, match="/v1/sneaky"):
        check_policies(included)


@pytest.mark.parametrize("key", sorted(ROUTES), ids=_id)
async def test_each_role_gets_what_the_declared_policy_says(
    server: ApiServer, callers: list[Caller], key: tuple[str, str]
) -> None:
    """Every role, on its own tenant's and on another tenant's object: 403 below the policy,
    404 for another tenant's task or schedule, else the route's success status."""
    policy_of(key)
    assert key in RECIPES, f"no request recipe for {_id(key)} in RECIPES"
    recipe = RECIPES[key][1]
    wrong = []
    async with server.queue() as queue, server.async_client() as http:
        fx = Fixtures(queue)
        for caller, target in itertools.product(callers, (OWN, OTHER) if recipe.owned else (OWN,)):
            call = await recipe.build(fx, target, caller.who)
            headers = {"Authorization": f"Bearer {caller.secret}"}
            answer = await _send(http, key, call, headers)
            want = expected_status(key, caller.who, recipe.owned, target)
            if answer.status_code != want:
                wrong.append(
                    f"{caller.who.role.value} on a {target} object: {answer.status_code}"
                    f" (expected {want}): {answer.text[:300]}"
                )
    assert not wrong, f"{_id(key)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("key", sorted(ROUTES), ids=_id)
async def test_bad_credentials_are_refused_with_a_challenge(
    server: ApiServer, bad_credentials: dict[str, dict[str, str]], key: tuple[str, str]
) -> None:
    """No token, a malformed, unknown, revoked or expired one: 401 with WWW-Authenticate,
    before the route does anything (the object named need not even exist)."""
    policy_of(key)
    call = Call(
        path={"task_id": str(uuid.uuid4()), "call_id": "call-1", "name": "nothing",
              "delivery_id": "1", "task_type": "docs"},
        body={},
    )  # fmt: skip
    wrong = []
    expected = AUTH_CHALLENGE if policy_of(key).signed is None else SIGNATURE_CHALLENGE
    async with server.async_client() as http:
        for what, headers in bad_credentials.items():
            answer = await _send(http, key, call, headers)
            challenge = answer.headers.get("www-authenticate")
            if answer.status_code != 401 or challenge != expected:
                wrong.append(f"{what}: {answer.status_code} challenge={challenge!r}")
            elif answer.headers["content-type"] != "application/problem+json":
                wrong.append(f"{what}: 401 as {answer.headers['content-type']}")
    assert not wrong, f"{_id(key)}:\n" + "\n".join(wrong)


async def test_lists_of_a_tenant_bound_token_hold_only_its_tenant(
    server: ApiServer, callers: list[Caller]
) -> None:
    """Tasks, dead letters and schedules of another tenant never appear in a tenant-bound
    token's lists, and a count covers its own tenant only."""
    async with server.queue() as queue:
        fx = Fixtures(queue)
        for tenant in (OWN, OTHER):
            await fx.task(tenant)
            await fx.dead(tenant)
            await fx.schedule(tenant)
    operator = next(c for c in callers if c.who.role is Role.OPERATOR)
    admin = next(c for c in callers if c.who.role is Role.ADMIN)
    with server.client(operator.secret) as http, server.client(admin.secret) as every:
        for path in ("/v1/tasks", "/v1/dlq"):
            mine = http.get(path, params={"limit": 1000}).json()["items"]
            assert mine and {t["tenant"] for t in mine} == {OWN}, path
            everyone = every.get(path, params={"limit": 1000}).json()["items"]
            assert {OWN, OTHER} <= {t["tenant"] for t in everyone}, path
        mine = http.get("/v1/schedules").json()
        assert mine and {s["tenant"] for s in mine} == {OWN}
        assert {OWN, OTHER} <= {s["tenant"] for s in every.get("/v1/schedules").json()}
        assert http.get("/v1/tasks", params={"tenant": OTHER}).status_code == 422
        total = http.get("/v1/stats").json()["total"]
        everything = every.get("/v1/stats").json()["total"]
        assert 0 < total < everything


async def test_a_revoked_token_stops_working(server: ApiServer) -> None:
    """Revoked through the API: refused at once by the process that revoked it. Revoked with
    the CLI: refused once the process's trust in it lapses ([api] token_cache_secs, 1 s)."""
    via_api = await server.token("revoke-api", "submitter", OWN)
    via_cli = await server.token("revoke-cli", "submitter", OWN)
    with server.client(via_api) as a, server.client(via_cli) as b:
        assert a.get("/v1/stats").status_code == 200
        assert b.get("/v1/stats").status_code == 200
        with server.client(server.admin_secret) as admin:
            assert admin.post("/v1/tokens/revoke-api/revoke").status_code == 200
        refused = a.get("/v1/stats")
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
        server.cli("tokens", "revoke", "revoke-cli")
        for _ in range(200):  # about 10 s, ten times the cache time
            if b.get("/v1/stats").status_code == 401:
                break
            await asyncio.sleep(0.05)
        assert b.get("/v1/stats").status_code == 401


async def test_a_tenant_bound_token_cannot_name_another_tenant(
    server: ApiServer, callers: list[Caller]
) -> None:
    """Naming another tenant in a body or a parameter is refused naming ``tenant``, and nothing
    is written there."""
    operator = next(c for c in callers if c.who.role is Role.OPERATOR)
    task = {"title": "elsewhere", "task_type": "docs", "tenant": OTHER}
    schedule = {"name": fresh_name("sched"), "cron": "0 4 * * *",
                "task": {"title": "t", "task_type": "docs"}}  # fmt: skip
    async with server.async_client(operator.secret) as http:
        before = (await http.get("/v1/stats")).json()
        refusals = {
            "tenant": await http.post("/v1/tasks", json=task),
            "tasks[0].tenant": await http.post("/v1/tasks/bulk", json={"tasks": [task]}),
        }
        for field_name, answer in refusals.items():
            assert answer.status_code == 422, answer.text
            assert [e["field"] for e in answer.json()["errors"]] == [field_name]
        for answer in (
            await http.post("/v1/schedules", params={"tenant": OTHER}, json=schedule),
            await http.get("/v1/schedules", params={"tenant": OTHER}),
            await http.get("/v1/tasks", params={"tenant": OTHER}),
        ):
            assert answer.status_code == 422, answer.text
            assert [e["field"] for e in answer.json()["errors"]] == ["tenant"]
        assert (await http.get("/v1/stats")).json() == before
    async with server.async_client(server.admin_secret) as admin:
        names = [s["name"] for s in (await admin.get("/v1/schedules")).json()]
        assert schedule["name"] not in names
