"""Real HTTP servers the delivery tests send to: a callback receiver that verifies each
delivery with ``standardwebhooks`` and records concurrent arrivals per ``webhook-id``, and a
fake GitHub REST API for comments."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from agentqueue import AsyncQueue
from agentqueue.config import Settings

SECRET = "whsec_" + base64.b64encode(b"agentqueue-test-callback-secret!").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"a-different-secret-for-the-test!").decode()
SECRET_ENV = "AQ_TEST_CALLBACK_SECRET"
TOKEN = "ghp_testtoken0123456789abcdefXYZ"
TOKEN_ENV = "AQ_TEST_GITHUB_TOKEN"


def wait_for(check: Callable[[], bool], within: float, what: str, every: float = 0.05) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``within`` seconds (a bound
    on an event, never a timing)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


@dataclass
class Arrival:
    """One request the receiver got."""

    webhook_id: str
    body: bytes
    headers: dict[str, str]
    verified: bool
    status: int


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Receiver:
    """A callback receiver: verifies every request with ``secret`` (401 when it fails), fails
    the first ``fail_first`` tries of each delivery with ``fail_status``, holds each answer
    ``hold_secs`` (the first ``hold_count`` only, if given: those then fail with 503, as a hung
    request whose sender went away), and records arrivals per
    webhook-id and any two requests of one webhook-id in flight at once."""

    secret: str = SECRET
    fail_first: int = 0
    fail_status: int = 500
    hold_secs: float = 0.0
    hold_count: int | None = None
    arrivals: list[Arrival] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: Counter[str] = field(default_factory=Counter)
    _seen: Counter[str] = field(default_factory=Counter)
    _held: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                receiver._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._srv = _Server(Handler)
        self.port = self._srv.port

    def url(self, path: str = "/cb", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self._srv.close()

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        body = req.rfile.read(int(req.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in req.headers.items()}
        wid = headers.get("webhook-id", "")
        try:
            Webhook(self.secret).verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        with self.lock:
            self._in_flight[wid] += 1
            if self._in_flight[wid] > 1:
                self.overlaps.append(wid)
            self._seen[wid] += 1
            nth = self._seen[wid]
            hold = self.hold_secs
            if self.hold_count is not None:
                hold = hold if self._held < self.hold_count else 0.0
                self._held += 1
        try:
            if hold:
                time.sleep(hold)
            status = 401 if not verified else (self.fail_status if nth <= self.fail_first else 204)
            if hold and self.hold_count is not None:
                status = 503  # a hung request never counts as delivered
            with self.lock:
                self.arrivals.append(Arrival(wid, body, headers, verified, status))
            req.send_response(status)
            req.send_header("Content-Length", "0")
            req.end_headers()
        except OSError:
            pass  # the sender went away (killed) before the answer
        finally:
            with self.lock:
                self._in_flight[wid] -= 1

    def delivered_ids(self) -> set[str]:
        with self.lock:
            return {a.webhook_id for a in self.arrivals if 200 <= a.status < 300}

    def successes(self) -> Counter[str]:
        with self.lock:
            return Counter(a.webhook_id for a in self.arrivals if 200 <= a.status < 300)

    def requests(self) -> int:
        with self.lock:
            return sum(self._seen.values())

    def in_flight(self) -> int:
        with self.lock:
            return sum(self._in_flight.values())

    def in_flight_ids(self) -> set[str]:
        """The webhook-ids of the requests being answered now (an arrival is recorded just
        before its answer goes out, so a delivered one may still be among them a moment)."""
        with self.lock:
            return {wid for wid, n in self._in_flight.items() if n > 0}


@dataclass
class FakeGitHub:
    """The comments part of GitHub's REST API: ``GET`` (``since``, ``per_page``, pages linked
    by ``Link: rel="next"``; ``page_size`` overrides per_page) and ``POST`` of
    ``/repos/{owner}/{repo}/issues/{n}/comments``. ``hold_posts``: that many POSTs are stored,
    then their answer is held until ``release`` is set (a deliverer killed meanwhile). Answers
    queued in ``post_answers`` (status, headers) are given to POSTs first, storing nothing."""

    page_size: int | None = None
    hold_posts: int = 0
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    post_answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                fake._get(self)

            def do_POST(self) -> None:
                fake._post(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._srv = _Server(Handler)
        self.api_url = f"http://127.0.0.1:{self._srv.port}/api/v3"

    def close(self) -> None:
        self.release.set()
        self._srv.close()

    def _issue(self, path: str) -> str | None:
        parts = path.split("/")
        # /api/v3/repos/{owner}/{repo}/issues/{n}/comments
        if (
            len(parts) == 9
            and parts[3] == "repos"
            and parts[6] == "issues"
            and parts[8] == "comments"
        ):
            return f"{parts[4]}/{parts[5]}#{parts[7]}"
        return None

    def _answer(
        self,
        req: BaseHTTPRequestHandler,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        req.send_response(status)
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _get(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        issue = self._issue(url.path)
        with self.lock:
            self.requests.append(("GET", req.path, {k.lower(): v for k, v in req.headers.items()}))
            found = list(self.comments.get(issue or "", []))
        if issue is None:
            self._answer(req, 404, {"message": "Not Found"})
            return
        query = parse_qs(url.query)
        since = query.get("since", [None])[0]
        if since:
            found = [c for c in found if c["updated_at"] >= since]
        size = self.page_size or int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        chunk = found[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(found):
            nxt = f"http://127.0.0.1:{self._srv.port}{url.path}?per_page={size}&page={page + 1}"
            if since:
                nxt += f"&since={since}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._answer(req, 200, chunk, headers)

    def _post(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        issue = self._issue(url.path)
        body = json.loads(req.rfile.read(int(req.headers.get("Content-Length", "0"))) or b"{}")
        with self.lock:
            self.requests.append(("POST", req.path, {k.lower(): v for k, v in req.headers.items()}))
            if self.post_answers:
                status, headers = self.post_answers.pop(0)
                answer: tuple[int, Any, dict[str, str]] | None = (
                    status,
                    {"message": "limited"},
                    headers,
                )
            else:
                answer = None
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                comment = {
                    "id": sum(len(c) for c in self.comments.values()) + 1,
                    "body": body.get("body", ""),
                    "created_at": now,
                    "updated_at": now,
                }
                self.comments[issue or ""].append(comment)
                hold = self.held < self.hold_posts
                self.held += 1 if hold else 0
        try:
            if answer is not None:
                self._answer(req, *answer)
                return
            if hold:
                self.release.wait(60)
            self._answer(req, 201, comment)
        except OSError:
            pass  # the deliverer went away before the answer

    def posts(self) -> int:
        with self.lock:
            return sum(1 for m, _, _ in self.requests if m == "POST")

    def all_comments(self, issue: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.comments.get(issue, []))

    def preload(self, issue: str, text: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self.lock:
            self.comments[issue].append(
                {"id": 0, "body": text, "created_at": now, "updated_at": now}
            )


@asynccontextmanager
async def opened(db_url: str, conf: Settings) -> AsyncIterator[AsyncQueue]:
    """A queue over ``db_url`` with ``conf``, open for the block."""
    q = AsyncQueue(db_url, settings=conf)
    await q.open()
    try:
        yield q
    finally:
        await q.close()
