"""Who is looking at the dashboard: the session cookie, the CSRF token of every form, and the
policy each page and action declares.

The session cookie holds the API token itself, HttpOnly (no script can read it), SameSite=Strict
(no other site's page sends it) and Secure over HTTPS, scoped to the dashboard's path. Every
request checks it again with the API's own Authenticator, so a revoked or expired token stops
working in the dashboard exactly as it does in the API, in every server process, with no
session table and nothing to keep in step between processes. The token is never written into a
page, a URL or a log.

The CSRF token of a form is an HMAC of a fixed label keyed by the session's token: only a page
the server rendered for that session can carry it, it needs no server-side state, and it
reveals nothing of the token. The login form, before there is a session, carries a random
value that must equal a short-lived HttpOnly, SameSite=Strict cookie set with the form.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs

from fastapi import Request

from ..domain.access import Policy, Principal
from ..domain.errors import Forbidden, Unauthenticated

COOKIE = "aq_session"
LOGIN_COOKIE = "aq_login"
CSRF_FIELD = "csrf"
SESSION_SECS = 12 * 3600
"""How long the browser keeps the session cookie (the token's own expiry still applies)."""


class LoginNeeded(Exception):
    """The request has no session, or its token no longer works: go to the login page."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Refused(Forbidden):
    """The session's role may not do this, or the form's CSRF token is missing or wrong."""


def csrf_token(secret: str) -> str:
    """The CSRF token of every form of the session whose token is ``secret``."""
    return hmac.new(secret.encode(), b"agentqueue dashboard csrf", hashlib.sha256).hexdigest()


def new_login_nonce() -> str:
    """A random value for the login form and its cookie."""
    return secrets.token_urlsafe(24)


async def form(request: Request) -> dict[str, list[str]]:
    """The fields of a urlencoded form post (each a list: a field may repeat)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return parse_qs(body, keep_blank_values=True)


def first(fields: dict[str, list[str]], name: str, default: str = "") -> str:
    """The first value of field ``name``."""
    values = fields.get(name)
    return values[0] if values else default


async def viewer(request: Request, policy: Policy) -> Principal:
    """The principal of the session, checked against ``policy``: LoginNeeded without a
    working session, Refused when the role (or tenant scope) does not allow it."""
    secret = request.cookies.get(COOKIE)
    if not secret:
        raise LoginNeeded()
    state = request.app.state
    try:
        who: Principal = await state.auth.principal(secret)
    except Unauthenticated:
        raise LoginNeeded("the session's token no longer works; log in again") from None
    state.limiter.take(who.name)
    if not policy.allows(who):
        raise Refused(f"{who.role.value} tokens cannot do this: it takes {policy.describe()}")
    request.state.principal = who
    request.state.csrf = csrf_token(secret)
    return who


def check_csrf(request: Request, fields: dict[str, list[str]]) -> None:
    """Refused unless the form carries the session's CSRF token (after :func:`viewer`)."""
    expected: str = request.state.csrf
    if not hmac.compare_digest(first(fields, CSRF_FIELD).encode(), expected.encode()):
        raise Refused("the form's CSRF token is missing or wrong; reload the page and try again")


async def acting(request: Request, policy: Policy) -> tuple[Principal, dict[str, list[str]]]:
    """For a form post: the session's principal (checked against ``policy``) and the form,
    whose CSRF token has been checked."""
    who = await viewer(request, policy)
    fields = await form(request)
    check_csrf(request, fields)
    return who, fields
