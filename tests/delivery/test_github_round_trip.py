"""From a GitHub issue to an agent and back, through real processes on each backend: a signed
``issues.opened`` delivery to ``agentqueue serve`` becomes a task, the served handler completes
it, and the fake GitHub API gets exactly one comment on that issue with the outcome, the
result and the marker. The same delivery again changes nothing and posts nothing more."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from delivery_receivers import TOKEN, TOKEN_ENV, FakeGitHub, wait_for

from agentqueue import Queue
from agentqueue.config import load_settings

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "api" / "fixtures" / "github" / "issues.opened.json"
AGENTQUEUE = str(Path(sys.executable).with_name("agentqueue"))
LISTENING = re.compile(r"API listening on (http://[\d.]+:\d+)/v1")
HOOK_SECRET = "round-trip-webhook-secret-5b1e"
HOOK_ENV = "AQ_TEST_ROUND_TRIP_SECRET"
ISSUE = "Codertocat/Hello-World#1"
CONFIG = """
[api]
requests_per_minute = 0

[[intake.github]]
repository = "Codertocat/*"
tenant = "gh"
secret_env = "{hook_env}"
labels = {{ "bug" = "bugfix" }}

[github]
api_url = "{api_url}"
token_env = "{token_env}"
backoff_first_secs = 0.1
backoff_max_secs = 0.5
"""


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def served(db_url: str, tmp_path: Path, github: FakeGitHub) -> Iterator[tuple[str, Queue]]:
    """``agentqueue serve`` (scheduler, worker with the round-trip app, API, deliverer) over
    ``db_url``; yields its address and a queue on the same database."""
    config = tmp_path / "agentqueue.toml"
    config.write_text(CONFIG.format(hook_env=HOOK_ENV, api_url=github.api_url, token_env=TOKEN_ENV))
    env = {
        **os.environ,
        "AGENTQUEUE_DB": db_url,
        "AGENTQUEUE_CONFIG": str(config),
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        HOOK_ENV: HOOK_SECRET,
        TOKEN_ENV: TOKEN,
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [AGENTQUEUE, "serve", "--app", "round_trip_app:queue", "--port", "0"],
            cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    queue = Queue(db_url, settings=load_settings(config))
    try:
        found: list[str] = []

        def listening() -> bool:
            assert proc.poll() is None, f"serve exited:\n{log.read_text()}"
            found.extend(LISTENING.findall(log.read_text()))
            return bool(found)

        wait_for(listening, 60, "serve listening")
        yield found[0], queue
        assert "Traceback" not in log.read_text(), log.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        queue.close()


def _post(address: str, body: bytes, delivery: str) -> httpx.Response:
    signature = hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": f"sha256={signature}",
    }
    return httpx.post(f"{address}/v1/intake/github", content=body, headers=headers, timeout=30)


def test_an_issue_becomes_a_task_and_its_end_one_comment_on_the_issue(
    served: tuple[str, Queue], github: FakeGitHub
) -> None:
    address, queue = served
    body = FIXTURE.read_bytes()
    delivery = str(uuid.uuid4())
    answer = _post(address, body, delivery)
    assert answer.status_code == 200, answer.text
    [made] = answer.json()["tasks"]
    assert made["outcome"] == "created"

    wait_for(lambda: len(github.all_comments(ISSUE)) >= 1, 60, "the reply on the issue")
    task = queue.get(made["id"])
    assert task.state.value == "completed"
    assert (task.source, task.source_id, task.tenant) == ("issue", ISSUE, "gh")
    title = json.loads(body)["issue"]["title"]
    [comment] = github.all_comments(ISSUE)
    assert "completed" in comment["body"]
    assert f"fixed: {title}" in comment["body"]
    assert f"task={task.id}" in comment["body"]

    again = _post(address, body, delivery)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # The deliverer records the reply once GitHub's answer is back, just after the comment.
    wait_for(
        lambda: len(queue.deliveries(kind="github_reply", state="delivered")) == 1,
        60,
        "the reply recorded as delivered",
    )
    [delivered] = queue.deliveries(kind="github_reply", state="delivered")
    assert delivered.task_id == task.id
    assert len(github.all_comments(ISSUE)) == 1
    assert github.posts() == 1
    auth = [h["authorization"] for m, _, h in github.requests if m == "POST"]
    assert auth == [f"Bearer {TOKEN}"]
