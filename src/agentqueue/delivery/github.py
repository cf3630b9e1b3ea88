"""Replies on the GitHub issue or pull request a task came from: one comment per task end.

The comment is rendered from ``[github] reply_template`` (Jinja2 in a sandbox) with the task
end's fields (``type``, ``task_id``, ``tenant``, ``title``, ``task_type``, ``source``,
``source_id``, ``state``, ``result``, ``result_text`` (the result as indented JSON), ``error``,
``reason``, ``retry_count``, ``ended_at``, ``event_seq``, ``repo``, ``number``), and ends with a
hidden marker naming the task and the end (``<!-- agentqueue: task=<id> end=<event_seq> -->``).

Exactly one comment per end, across restarts and several deliverers: before posting, the
deliverer lists the issue's comments updated since the end (an hour earlier, for clocks that
disagree), following every ``Link: rel="next"``; if one carries the marker, an earlier try
posted it (and was stopped before it could record so), and the delivery is marked delivered
without posting again. Deliverers never hold one delivery at once (the outbox lease), so
listing then posting cannot race another deliverer.

The token is read from the environment variable ``[github] token_env`` when sending; without
it, replies wait in the outbox. A 403 or 429 with ``Retry-After`` (or an exhausted
``x-ratelimit-remaining`` with ``x-ratelimit-reset``) is tried again no sooner than GitHub says.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..domain.alerts import redact
from ..domain.deliveries import GITHUB_REPLY_KIND
from ..service.runtime import Runtime
from ..store.base import OutboxRow
from .callbacks import next_within_horizon
from .outbox import Try

if TYPE_CHECKING:  # imported where a reply is sent: a worker starts without them
    import httpx
    from jinja2 import Template

log = logging.getLogger("agentqueue.deliveries")

USER_AGENT = "agentqueue-replies"
MAX_COMMENT_CHARS = 60_000
"""GitHub takes comments of up to 65,536 characters; the marker must survive truncation."""
MAX_PAGES = 50
"""Pages of comments (100 each) read when looking for the marker."""
CLOCK_MARGIN = timedelta(hours=1)


def marker(row: OutboxRow) -> str:
    """The hidden line that says which task end a comment is about."""
    return f"<!-- agentqueue: task={row.task_id} end={row.event_seq} -->"


def _retry_at(response: httpx.Response, now: datetime) -> datetime | None:
    """When GitHub says to come back (secondary and primary rate limits), if it says."""
    after = response.headers.get("retry-after")
    if after is not None:
        try:
            return now + timedelta(seconds=float(after))
        except ValueError:
            pass
    if response.headers.get("x-ratelimit-remaining") == "0":
        try:
            return datetime.fromtimestamp(float(response.headers["x-ratelimit-reset"]), UTC)
        except (KeyError, ValueError):
            return None
    return None


class GitHubReplyChannel:
    """Comments on GitHub issues and pull requests."""

    kind = GITHUB_REPLY_KIND

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._env: Any = None
        self._templates: dict[str, Template] = {}

    @property
    def timeout_secs(self) -> float:
        """``[github] timeout_secs``: the whole try (listing and posting)."""
        return self.rt.settings.github.timeout_secs

    def _token(self) -> str | None:
        name = self.rt.settings.github.token_env
        return (os.environ.get(name) or None) if name else None

    def ready(self) -> bool:
        """A token is configured."""
        return self._token() is not None

    def not_ready_warning(self) -> str:
        """Replies wait: no token."""
        name = self.rt.settings.github.token_env
        if name is None:
            return "GitHub replies wait in the outbox: no [github] token_env is configured"
        return (
            f"GitHub replies wait in the outbox: the environment variable {name} "
            "([github] token_env) is not set"
        )

    def render(self, body: dict[str, Any]) -> str:
        """The comment's text without its marker, cut to fit."""
        text = self.rt.settings.github.reply_template
        template = self._templates.get(text)
        if template is None:
            if self._env is None:  # jinja2 is imported when the first reply is written
                from jinja2.sandbox import SandboxedEnvironment

                self._env = SandboxedEnvironment(autoescape=False)
            template = self._templates[text] = self._env.from_string(text)
        result = body.get("result")
        fields = {
            **body,
            "result_text": "" if result is None else json.dumps(result, indent=2)[:10_000],
        }
        rendered = template.render(**fields).strip()
        if len(rendered) > MAX_COMMENT_CHARS:
            rendered = rendered[: MAX_COMMENT_CHARS - 1] + "…"
        return rendered

    async def send(self, http: httpx.AsyncClient, row: OutboxRow) -> Try:
        """Look for the marker; post the comment if it is not there."""
        token = self._token()
        if token is None:
            return Try(False, error="no GitHub token configured")
        body = dict(row.body)
        url = (
            f"{self.rt.settings.github.api_url}/repos/{body['repo']}/issues/{body['number']}"
            "/comments"
        )
        headers = {
            "authorization": f"Bearer {token}",
            "accept": "application/vnd.github+json",
            "x-github-api-version": "2022-11-28",
            "user-agent": USER_AGENT,
        }
        mark = marker(row)
        since = (row.created_at - CLOCK_MARGIN).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        page_url: str | None = url
        params: dict[str, str] | None = {"since": since, "per_page": "100"}
        pages = 0
        try:
            while page_url is not None and pages < MAX_PAGES:
                response = await http.get(page_url, params=params, headers=headers)
                pages += 1
                if response.status_code != 200:
                    return self._failed(response, "listing comments")
                for comment in response.json():
                    if mark in str(comment.get("body") or ""):
                        return Try(True, response.status_code)
                next_link = response.links.get("next", {}).get("url")
                page_url, params = (next_link, None) if next_link else (None, None)
            try:
                text = self.render(body)
            except Exception as exc:  # the template meets a field it cannot use: not sent
                return Try(
                    False,
                    error=redact(f"[github] reply_template: {type(exc).__name__}: {exc}"),
                    give_up=True,
                )
            response = await http.post(url, json={"body": f"{text}\n\n{mark}"}, headers=headers)
        except Exception as exc:  # recorded (masked) and tried again later
            return Try(False, error=redact(f"{type(exc).__name__}: {exc}".rstrip(": ")))
        if 200 <= response.status_code < 300:
            return Try(True, response.status_code)
        return self._failed(response, "posting the comment")

    def _failed(self, response: httpx.Response, doing: str) -> Try:
        retry_at = None
        if response.status_code in (403, 429):
            retry_at = _retry_at(response, self.rt.clock.now())
        return Try(
            False, response.status_code, f"HTTP {response.status_code} {doing}", retry_at=retry_at
        )

    def next_try(self, row: OutboxRow, tried: Try, now: datetime) -> datetime | None:
        """Exponential backoff with jitter (no sooner than GitHub asked), until the horizon."""
        return next_within_horizon(self.rt.settings.github, row, tried, now)
