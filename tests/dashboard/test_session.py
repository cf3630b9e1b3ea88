"""The dashboard's session rules over HTTP, on each backend, with the app served in this process:
the login form's nonce, redirects that never leave the site, and routes that all declare a
policy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentqueue import AsyncQueue
from agentqueue.api.app import create_app
from agentqueue.api.auth import route_policy
from agentqueue.dashboard.routes import local, router
from agentqueue.dashboard.session import COOKIE, LOGIN_COOKIE


@pytest.fixture
async def http(queue: AsyncQueue) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app over ``queue``, through its ASGI interface."""
    app = create_app(queue)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
            yield client


def test_every_dashboard_route_declares_a_policy() -> None:
    """Each page and action records the policy it enforces (as the API's routes do)."""
    for route in router.routes:
        assert route_policy(route) is not None, route  # type: ignore[arg-type]


def test_redirect_targets_stay_on_this_site() -> None:
    """Only a path of this server is followed after login or an action."""
    assert local("/tasks?state=queued") == "/tasks?state=queued"
    for elsewhere in ("https://evil.example/", "//evil.example/", "/\\evil.example", "tasks"):
        assert local(elsewhere) == "/"


async def test_login_needs_the_forms_nonce_and_a_working_token(
    queue: AsyncQueue, http: httpx.AsyncClient
) -> None:
    """A login post without the nonce of its form's cookie is refused (403) even with a good
    token; a wrong token is refused (401) and not echoed; a good one starts the session and
    is sent back to ``next`` only when it is a path here."""
    made = await queue.create_token("olivia", role="operator")
    form = await http.get("/login")
    nonce = form.cookies[LOGIN_COOKIE]
    assert nonce in form.text
    http.cookies.clear()
    refused = await http.post("/login", data={"csrf": nonce, "token": made.secret})
    assert refused.status_code == 403 and COOKIE not in refused.cookies
    http.cookies.set(LOGIN_COOKIE, nonce)
    wrong = await http.post("/login", data={"csrf": nonce, "token": "aq_wrong_secret"})
    assert wrong.status_code == 401 and "aq_wrong_secret" not in wrong.text
    good = await http.post(
        "/login", data={"csrf": nonce, "token": made.secret, "next": "//evil.example/"}
    )
    assert good.status_code == 303 and good.headers["location"] == "/"
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = await http.get("/tasks")
    assert page.status_code == 200 and made.secret not in page.text


async def test_pages_without_a_session_go_to_the_login_page(http: httpx.AsyncClient) -> None:
    """A page asked for without a session redirects to the login form; an action posted
    without one changes nothing and does the same."""
    for method, path in (("GET", "/"), ("GET", "/tasks"), ("POST", "/paused")):
        answer = await http.request(method, path, data={"task_type": "x", "action": "pause"})
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/login")
