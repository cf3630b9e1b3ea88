"""GitHub webhooks (R18) through a real server on both backends: every fixture gives its task
or its reason to do nothing; forged, truncated, malformed and unknown deliveries are refused
and write nothing; a redelivery changes nothing; the triggers and their order."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from github_hooks import (
    OCTO_SECRET,
    RULES,
    SECRET,
    SECRET_ENV,
    TENANT,
    event_of,
    headers,
    post,
    raw,
    send,
    sign,
    variant,
)
from http_server import KINDS, MAIN_API_SETTINGS, ApiServer, run_sql, running_server

from agentqueue.api.problems import SIGNATURE_CHALLENGE

URL = "/v1/intake/github"
TABLES = ("aq_tasks", "aq_events", "aq_intake_deliveries", "aq_intake_sources")


@pytest.fixture(scope="module", params=KINDS)
def hooks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A server with the test rules and their secrets in its environment."""
    directory = tmp_path_factory.mktemp(f"github-{request.param}")
    with running_server(
        request.param, directory, MAIN_API_SETTINGS, RULES, env=SECRET_ENV
    ) as found:
        yield found
        assert found.alive(), f"the server stopped:\n{found.log()[-3000:]}"
        assert "Traceback" not in found.log(), f"the server logged:\n{found.log()[-3000:]}"


def counts(server: ApiServer) -> dict[str, int]:
    """Rows in every table a delivery may write."""
    return {t: run_sql(server.db_url, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


def tasks_of(server: ApiServer, source_id: str) -> list[dict[str, Any]]:
    """The tasks of one issue or pull request, oldest first."""
    rows = run_sql(
        server.db_url,
        "SELECT id, state, task_type, priority, idempotency_key, requested_by, tenant, source,"
        " title, payload, state_reason FROM aq_tasks WHERE source_id = %s ORDER BY created_at",
        (source_id,),
    )
    keys = ("id", "state", "task_type", "priority", "idempotency_key", "requested_by", "tenant")
    out = []
    for row in rows:
        item = dict(zip(keys, row[:7], strict=True))
        item["id"] = str(item["id"])
        item.update(source=row[7], title=row[8], state_reason=row[10])
        item["payload"] = row[9] if isinstance(row[9], dict) else json.loads(row[9])
        out.append(item)
    return out


def events_of(server: ApiServer, task_id: str) -> list[tuple[Any, ...]]:
    """(seq, from, to, action, actor, reason, data) of a task's events."""
    return run_sql(
        server.db_url,
        "SELECT seq, from_state, to_state, action, actor, reason, data FROM aq_events"
        " WHERE task_id = %s ORDER BY seq",
        (task_id,),
    )


def _repo() -> str:
    return f"case-{uuid.uuid4().hex[:8]}"


def _only(answer: httpx.Response, outcome: str) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["duplicate"] is False
    [task] = [t for t in body["tasks"] if t["outcome"] == outcome]
    return dict(task)


# --- the fixtures as GitHub sends them -------------------------------------------------------


def test_every_fixture_gives_its_task_or_its_reason(hooks: ApiServer) -> None:
    """Sent as they are, in an order a repository could see them: a ping, an issue opened with
    the trigger label (then the same again with an empty body, and labelled), a comment with no
    command, a pull request opened and synchronized to the same head."""
    with hooks.client() as http:
        ping = post(http, "ping", raw("ping"), secret=OCTO_SECRET)  # Octocoders: its own rule
        assert ping.status_code == 200 and ping.json()["pong"] is True, ping.text
        issue = _only(post(http, "issues", raw("issues.opened")), "created")
        for name in ("issues.opened.with-empty-body", "issues.labeled"):
            again = _only(post(http, event_of(name), raw(name)), "matched")
            assert again["id"] == issue["id"] and again["matched_by"] == "source"
        comment = post(http, "issue_comment", raw("issue_comment.created"))
        assert comment.status_code == 202
        assert comment.json() == {"ignored": "the comment holds no command"}
        review = _only(post(http, "pull_request", raw("pull_request.opened")), "created")
        pushed = _only(post(http, "pull_request", raw("pull_request.synchronize")), "matched")
        assert pushed["id"] == review["id"]
    [task] = tasks_of(hooks, "Codertocat/Hello-World#1")
    assert task["id"] == issue["id"]
    assert (task["tenant"], task["source"], task["task_type"]) == (TENANT, "issue", "bugfix")
    assert task["requested_by"] == "Codertocat" and task["priority"] == 5
    assert task["title"] == "Spelling error in the README file"
    assert task["idempotency_key"] == "Codertocat/Hello-World#1/opened@2019-05-15T15:20:18Z"
    payload = task["payload"]
    assert set(payload) == {
        "repository", "number", "kind", "title", "body", "labels", "author", "html_url",
        "api_url", "updated_at", "trigger",
    }  # fmt: skip
    assert payload["labels"] == ["bug"] and payload["author"] == "Codertocat"
    assert payload["api_url"] == "https://api.github.com/repos/Codertocat/Hello-World/issues/1"
    [pr] = tasks_of(hooks, "Codertocat/Hello-World#2")
    sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert (pr["source"], pr["task_type"], pr["idempotency_key"]) == (
        "pr",
        "review",
        f"Codertocat/Hello-World#2@{sha}",
    )
    assert pr["payload"]["head"] == {"ref": "changes", "sha": sha}
    assert pr["payload"]["base"]["ref"] == "master"
    assert "installation" not in pr["payload"] and "sender" not in pr["payload"]


def test_forged_broken_and_unknown_deliveries_are_refused_and_write_nothing(
    hooks: ApiServer,
) -> None:
    body = raw("issues.opened")
    before = counts(hooks)
    forged_repo = json.dumps({**json.loads(body), "repository": {"full_name": "else/where"}})
    with hooks.client() as http:

        def send_raw(content: bytes, hdrs: dict[str, str]) -> httpx.Response:
            return http.post(URL, content=content, headers=hdrs)

        refused = {
            "wrong secret": send_raw(body, headers("issues", body, secret="not-the-secret")),
            "another rule's secret": send_raw(body, headers("issues", body, secret=OCTO_SECRET)),
            "no signature": send_raw(body, headers("issues", body, secret=None)),
            "not sha256=": send_raw(
                body, {**headers("issues", body), "X-Hub-Signature-256": "sha1=abc"}
            ),
            "truncated": send_raw(body[: len(body) // 2], headers("issues", body)),
            "no rule for the repository": send_raw(
                forged_repo.encode(), headers("issues", forged_repo.encode())
            ),
        }
        for what, answer in refused.items():
            assert answer.status_code == 401, (what, answer.text)
            assert answer.headers["content-type"] == "application/problem+json", what
            assert answer.headers["www-authenticate"] == SIGNATURE_CHALLENGE, what
            assert "X-Hub-Signature-256" in answer.json()["detail"], what
        malformed = b'{"action": "opened", "issue": '
        bad = {
            "body": send_raw(malformed, headers("issues", malformed)),
            "body ": send_raw(b"[1, 2]", headers("issues", b"[1, 2]")),
            "X-GitHub-Event": send_raw(
                body, {k: v for k, v in headers("issues", body).items() if k != "X-GitHub-Event"}
            ),
            "X-GitHub-Delivery": send_raw(
                body,
                {k: v for k, v in headers("issues", body).items() if k != "X-GitHub-Delivery"},
            ),
        }
        for field_name, answer in bad.items():
            assert answer.status_code == 400, (field_name, answer.text)
            assert [e["field"] for e in answer.json()["errors"]] == [field_name.strip()]
        wrong_type = variant("issues.opened", "typed")
        wrong_type["issue"]["number"] = "one"
        del wrong_type["issue"]["updated_at"]
        answer = send(http, "issues", wrong_type)
        assert answer.status_code == 400, answer.text
        fields = {e["field"]: e["message"] for e in answer.json()["errors"]}
        assert set(fields) == {"issue.number", "issue.updated_at"}
        assert fields["issue.updated_at"] == "required"
        unknown = post(http, "star", body)
        assert unknown.status_code == 202
        assert unknown.json() == {"ignored": "event star is not handled"}
    assert counts(hooks) == before
    log = hooks.log()
    for secret in (SECRET, OCTO_SECRET):
        assert secret not in log
        for answer in [*refused.values(), *bad.values()]:
            assert secret not in answer.text


def test_the_same_delivery_twenty_times_makes_one_task_with_one_trail(hooks: ApiServer) -> None:
    """Ten in a row, then ten at once: one task, one set of events, 19 duplicates answered
    with the first answer."""
    repo = _repo()
    body = json.dumps(variant("issues.opened", repo, 7)).encode()
    hdrs = headers("issues", body)
    answers = []
    with hooks.client() as http:
        for _ in range(10):
            answers.append(http.post(URL, content=body, headers=hdrs))

    async def together() -> list[httpx.Response]:
        async with hooks.async_client() as http:
            return await asyncio.gather(
                *(http.post(URL, content=body, headers=hdrs) for _ in range(10))
            )

    answers += asyncio.run(together())
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    bodies = [a.json() for a in answers]
    firsts = [b for b in bodies if not b["duplicate"]]
    assert len(firsts) == 1
    [first] = firsts
    assert first["tasks"][0]["outcome"] == "created"
    duplicates = [b for b in bodies if b["duplicate"]]
    assert len(duplicates) == 19
    assert all({**d, "duplicate": False} == first for d in duplicates)
    [task] = tasks_of(hooks, f"Codertocat/{repo}#7")
    trail = events_of(hooks, task["id"])
    assert [e[3] for e in trail] == ["submit", "admit"]
    delivered = run_sql(
        hooks.db_url,
        "SELECT count(*) FROM aq_intake_deliveries WHERE delivery_id = %s",
        (hdrs["X-GitHub-Delivery"],),
    )
    assert delivered == [(1,)]


# --- who may trigger what -----------------------------------------------------------------


def test_a_label_from_a_non_collaborator_does_nothing(hooks: ApiServer) -> None:
    repo = _repo()
    before = counts(hooks)
    labeled = variant("issues.labeled", repo, 3)
    labeled["issue"]["author_association"] = "NONE"
    with hooks.client() as http:
        answer = send(http, "issues", labeled)
    assert answer.status_code == 202, answer.text
    why = answer.json()["ignored"]
    assert "Codertocat (NONE)" in why and "OWNER, MEMBER, COLLABORATOR" in why
    assert counts(hooks) == before
    assert why in hooks.log()


def test_comment_commands_from_collaborators_only(hooks: ApiServer) -> None:
    """``/agent fix`` creates, ``@agentqueue`` works as ``/agent``, ``/agent priority P0``
    reprioritizes (audited with both priorities), and ``/agent cancel`` cancels; the same
    commands from someone outside the allow-list do nothing."""
    repo = _repo()
    sid = f"Codertocat/{repo}#5"

    def comment(text: str, association: str = "COLLABORATOR", cid: int = 0) -> dict[str, Any]:
        body = variant("issue_comment.created", repo, 5)
        body["comment"].update(
            body=text, author_association=association, id=cid or uuid.uuid4().int % 10**9
        )
        return body

    with hooks.client() as http:
        outsider = send(http, "issue_comment", comment("/agent fix", "CONTRIBUTOR"))
        assert outsider.status_code == 202 and "not acted on" in outsider.json()["ignored"]
        assert tasks_of(hooks, sid) == []
        created = _only(
            send(http, "issue_comment", comment("Please\n/agent fix\nthanks")), "created"
        )
        assert created["task_type"] == "bugfix"
        mention = _only(send(http, "issue_comment", comment("@agentqueue review this")), "matched")
        assert mention["id"] == created["id"]
        raised = _only(send(http, "issue_comment", comment("/agent priority P0")), "reprioritized")
        assert raised["priority"] == 0
        refused = send(http, "issue_comment", comment("/agent cancel", "NONE"))
        assert refused.status_code == 202
        cancelled = _only(send(http, "issue_comment", comment("/agent cancel")), "cancelled")
        assert cancelled["id"] == created["id"] and cancelled["state"] == "cancelled"
        nothing = send(http, "issue_comment", comment("/agent cancel"))
        assert nothing.json() == {"ignored": f"/agent cancel: {sid} has no live task"}
        unknown = send(http, "issue_comment", comment("/agent dance"))
        assert "unknown command 'dance'" in unknown.json()["ignored"]
    trail = events_of(hooks, created["id"])
    actions = [e[3] for e in trail]
    assert actions == ["submit", "admit", "reprioritize", "cancel"]
    data = trail[2][6] if isinstance(trail[2][6], dict) else json.loads(trail[2][6])
    assert data == {"priority": 0, "previous_priority": 5}
    assert trail[3][4] == "Codertocat" and "/agent cancel by Codertocat" in trail[3][5]


def test_closing_the_issue_cancels_its_task(hooks: ApiServer) -> None:
    repo = _repo()
    with hooks.client() as http:
        task = _only(send(http, "issues", variant("issues.opened", repo, 9)), "created")
        closed = variant(
            "issues.opened", repo, 9, action="closed", **{"issue.state": "closed",
            "issue.updated_at": "2019-05-16T10:00:00Z"}
        )  # fmt: skip
        done = _only(send(http, "issues", closed), "cancelled")
    assert done["id"] == task["id"]
    [row] = tasks_of(hooks, f"Codertocat/{repo}#9")
    assert row["state"] == "cancelled" and "closed on GitHub by Codertocat" in row["state_reason"]


def test_a_push_supersedes_the_review_and_an_older_push_does_not(hooks: ApiServer) -> None:
    repo = _repo()
    sid = f"Codertocat/{repo}#4"
    new_sha, old_sha = "b" * 40, "c" * 40
    with hooks.client() as http:
        first = _only(
            send(http, "pull_request", variant("pull_request.opened", repo, 4)), "created"
        )
        push = variant(
            "pull_request.synchronize", repo, 4, after=new_sha,
            **{"pull_request.head.sha": new_sha, "pull_request.updated_at": "2019-05-15T16:00:00Z"},
        )  # fmt: skip
        answer = send(http, "pull_request", push)
        superseded = _only(answer, "cancelled")
        review = _only(answer, "created")
        assert superseded["id"] == first["id"] and new_sha in superseded["reason"]
        late = variant(
            "pull_request.synchronize", repo, 4, after=old_sha,
            **{"pull_request.head.sha": old_sha, "pull_request.updated_at": "2019-05-15T15:40:00Z"},
        )  # fmt: skip
        stale = send(http, "pull_request", late)
        assert stale.status_code == 202 and "is older than head" in stale.json()["ignored"]
    rows = tasks_of(hooks, sid)
    assert [(r["id"], r["state"]) for r in rows] == [
        (first["id"], "cancelled"),
        (review["id"], "queued"),
    ]
    assert rows[1]["idempotency_key"] == f"{sid}@{new_sha}"
    assert f"superseded by push {new_sha}" in rows[0]["state_reason"]


def test_out_of_order_deliveries_act_as_if_in_order(hooks: ApiServer) -> None:
    """A label before its opened gives one task; a close processed before an earlier opened
    leaves no live task."""
    with hooks.client() as http:
        repo = _repo()
        labeled = _only(send(http, "issues", variant("issues.labeled", repo, 1)), "created")
        opened = _only(send(http, "issues", variant("issues.opened", repo, 1)), "matched")
        assert opened["id"] == labeled["id"]
        assert len(tasks_of(hooks, f"Codertocat/{repo}#1")) == 1
        repo = _repo()
        closed = variant(
            "issues.opened", repo, 2, action="closed", **{"issue.state": "closed",
            "issue.updated_at": "2019-05-15T15:30:00Z"}
        )  # fmt: skip
        assert send(http, "issues", closed).json()["tasks"] == []
        late = send(http, "issues", variant("issues.opened", repo, 2))
        assert late.status_code == 202 and "was closed at" in late.json()["ignored"]
        assert tasks_of(hooks, f"Codertocat/{repo}#2") == []


def test_a_draft_waits_for_ready_for_review(hooks: ApiServer) -> None:
    repo = _repo()
    with hooks.client() as http:
        draft = variant("pull_request.opened", repo, 6, **{"pull_request.draft": True})
        waiting = send(http, "pull_request", draft)
        assert waiting.status_code == 202 and "draft" in waiting.json()["ignored"]
        ready = variant("pull_request.opened", repo, 6, action="ready_for_review")
        _only(send(http, "pull_request", ready), "created")


def test_secrets_are_not_logged_even_for_a_signature_of_the_right_secret(
    hooks: ApiServer,
) -> None:
    """The signature of a valid delivery is not the secret, but neither appears in answers."""
    body = json.dumps(variant("issues.opened", _repo(), 8)).encode()
    with hooks.client() as http:
        answer = http.post(URL, content=body, headers=headers("issues", body))
    assert answer.status_code == 200
    assert SECRET not in answer.text and sign(body) not in answer.text
    assert SECRET not in hooks.log() and OCTO_SECRET not in hooks.log()
