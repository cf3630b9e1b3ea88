"""Replies on the GitHub issue a task came from, against a fake GitHub API (a real HTTP
server), on each backend: one comment per task end with its hidden marker, never a second one
when the marker is already there (on any page), the API's headers, rate limits honoured, and a
reply template that does not parse is a config error naming it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from delivery_receivers import TOKEN, TOKEN_ENV, FakeGitHub, opened

from agentqueue import AsyncQueue, ConfigError, Task
from agentqueue.config import Settings, load_settings
from agentqueue.domain.deliveries import GITHUB_REPLY_KIND

ISSUE = "octo/hello#7"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def settings(github: FakeGitHub, **more: Any) -> Settings:
    conf = {"api_url": github.api_url, "token_env": TOKEN_ENV, "backoff_first_secs": 0.02,
            "backoff_max_secs": 0.1, "timeout_secs": 5, **more}  # fmt: skip
    return Settings(github=conf)


async def ended(q: AsyncQueue, source_id: str = ISSUE, source: str = "issue") -> Task:
    """A task from ``source_id`` that completed."""
    await q.submit(title="Fix the login bug", task_type="bugfix", source=source,
                   source_id=source_id, payload={"body": "private"})  # fmt: skip
    [task] = await q.claim(1, "worker-1")
    return await q.complete(task.id, task.lock_token, {"summary": "fixed in #9"})


async def all_delivered(q: AsyncQueue, n: int, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        await q.deliver()
        found = await q.deliveries(kind=GITHUB_REPLY_KIND)
        if sum(d.state != "pending" for d in found) >= n:
            return
        assert asyncio.get_running_loop().time() < deadline, f"not delivered: {found}"
        await asyncio.sleep(0.02)


async def test_one_comment_per_task_end_with_its_marker(
    db_url: str, github: FakeGitHub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with opened(db_url, settings(github)) as q:
        task = await ended(q)
        await ended(q, "octo/hello#8", source="pr")
        await q.submit(title="not from GitHub", task_type="docs", source="issue",
                       source_id="not-a-github-id")  # fmt: skip
        await all_delivered(q, 2)
        for _ in range(3):
            assert await q.deliver() == 0
        [row] = await q.deliveries(task_id=task.id)
    [comment] = github.all_comments(ISSUE)
    assert len(github.all_comments("octo/hello#8")) == 1 and github.posts() == 2
    text = comment["body"]
    assert f"<!-- agentqueue: task={task.id} end={task.event_seq} -->" in text
    assert "completed" in text and "fixed in #9" in text and "private" not in text
    posts = {path: headers for method, path, headers in github.requests if method == "POST"}
    headers = posts["/api/v3/repos/octo/hello/issues/7/comments"]
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["accept"] == "application/vnd.github+json"
    assert headers["x-github-api-version"] == "2022-11-28"
    async with opened(db_url, settings(github)) as q:
        shown = await q.delivery(row.id)
    assert shown.state == "delivered" and [t.status_code for t in shown.tries] == [201]
    assert TOKEN not in caplog.text and TOKEN not in str(shown.to_json())


async def test_a_marker_already_on_the_issue_means_no_second_comment(
    db_url: str, github: FakeGitHub
) -> None:
    """A comment an earlier try posted (its deliverer stopped before recording it), found on
    the third page of comments: delivered without posting."""
    github.page_size = 2
    async with opened(db_url, settings(github)) as q:
        task = await ended(q)
        for i in range(4):
            github.preload(ISSUE, f"chatter {i}")
        github.preload(
            ISSUE, f"earlier\n\n<!-- agentqueue: task={task.id} end={task.event_seq} -->"
        )
        await all_delivered(q, 1)
        [row] = await q.deliveries()
    assert row.state == "delivered" and github.posts() == 0
    gets = [r for r in github.requests if r[0] == "GET"]
    assert len(gets) == 3 and "since=" in gets[0][1]


async def test_a_rate_limited_post_waits_as_long_as_github_says(
    db_url: str, github: FakeGitHub
) -> None:
    github.post_answers = [(429, {"Retry-After": "120"})]
    async with opened(db_url, settings(github)) as q:
        await ended(q)
        before = q.clock.now()
        assert await q.deliver() == 0
        [row] = await q.deliveries()
    assert row.last_status == 429 and row.next_attempt_at >= before + timedelta(seconds=119)
    assert github.all_comments(ISSUE) == []


async def test_without_a_token_replies_wait(
    db_url: str, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    async with opened(db_url, settings(github)) as q:
        await ended(q)
        assert await q.deliver() == 0
        [row] = await q.deliveries()
    assert row.state == "pending" and row.attempts == 0 and github.requests == []


def test_a_reply_template_that_does_not_parse_is_a_config_error(tmp_path: Any) -> None:
    path = tmp_path / "aq.toml"
    path.write_text('[github]\nreply_template = """\nok\nfine\n{{ state + }}\n"""\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    [problem] = raised.value.problems
    assert problem.field == "github.reply_template" and "line 3" in problem.message
