"""What a GitHub delivery asks for under a rule (intake.github): pure, no server."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentqueue.config import GitHubRule
from agentqueue.intake import github, github_payload

FIXTURES = Path(__file__).parents[1] / "api" / "fixtures" / "github"
RULE = GitHubRule(
    repository="Codertocat/*",
    tenant="gh",
    secret_env="GH_SECRET",
    labels={"bug": "bugfix"},
    mention="@agentqueue",
)


def body(name: str, **changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(json.loads((FIXTURES / f"{name}.json").read_text()))
    for path, value in changes.items():
        node = out
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return out


def comment(text: str, association: str = "MEMBER") -> dict[str, Any]:
    return body(
        "issue_comment.created",
        **{"comment.body": text, "comment.author_association": association},
    )


def test_signatures_are_githubs_and_compared_whole() -> None:
    raw = (FIXTURES / "issues.opened.json").read_bytes()
    good = github.signature("s3cret", raw)
    assert good.startswith("sha256=") and len(good) == 7 + 64
    assert github.signed_with("s3cret", raw, good)
    assert not github.signed_with("s3cret", raw, good[:-1])
    assert not github.signed_with("other", raw, good)
    assert not github.signed_with("s3cret", raw[:-1], good)


def test_the_secret_is_chosen_by_the_repository_and_an_orgs_ping_by_its_owner() -> None:
    other = GitHubRule(repository="octo/api", tenant="o", secret_env="OCTO")
    rules = [RULE, other]
    assert github.rules_for(rules, github.Target("codertocat/hello", "codertocat")) == [RULE]
    assert github.rules_for(rules, github.Target(None, "octo")) == [other]
    assert github.rules_for(rules, github.Target("else/where", "else")) == []
    raw = b"{}"
    secrets = {"GH_SECRET": "a", "OCTO": "b"}
    signed_b = github.signature("b", raw)
    assert github.verify(rules, lambda r: secrets.get(r.secret_env), raw, signed_b) is other
    assert github.verify([RULE], lambda r: secrets.get(r.secret_env), raw, signed_b) is None
    assert github.verify([RULE], lambda _r: None, raw, github.signature("", raw)) is None


def test_an_issue_opened_with_a_trigger_label_asks_for_a_task() -> None:
    plan = github.decide(RULE, "issues", body("issues.opened"))
    assert isinstance(plan, github.Plan) and plan.new_task is not None
    assert (plan.tenant, plan.source, plan.source_id) == ("gh", "issue", "Codertocat/Hello-World#1")
    assert plan.new_task.task_type == "bugfix" and plan.new_task.priority == 5
    assert plan.actor == "Codertocat" and plan.state == "open"
    unlabeled = github.decide(RULE, "issues", body("issues.opened", **{"issue.labels": []}))
    assert unlabeled == github.Ignored("Codertocat/Hello-World#1 carries no trigger label")


def test_priority_labels_set_the_priority_and_p0_comes_with_a_key() -> None:
    labels = [{"name": "bug"}, {"name": "priority:P0"}]
    plan = github.decide(RULE, "issues", body("issues.opened", **{"issue.labels": labels}))
    assert isinstance(plan, github.Plan) and plan.new_task is not None
    assert plan.new_task.priority == 0 and plan.new_task.idempotency_key


@pytest.mark.parametrize(
    ("text", "command", "task_type", "priority"),
    [
        ("/agent fix", None, "bugfix", None),
        ("Thanks!\n  /agent review please", None, "review", None),
        ("@agentqueue fix this", None, "bugfix", None),
        ("@AgentQueue FIX", None, "bugfix", None),
        ("/agent cancel", "cancel", None, None),
        ("/agent retry", "retry", None, None),
        ("/agent priority P0", "priority", None, 0),
        ("/agent priority 7", "priority", None, 7),
    ],
)
def test_comment_commands(
    text: str, command: str | None, task_type: str | None, priority: int | None
) -> None:
    plan = github.decide(RULE, "issue_comment", comment(text))
    assert isinstance(plan, github.Plan), plan
    assert plan.command == command and plan.priority == priority
    assert (plan.new_task.task_type if plan.new_task else None) == task_type
    if plan.new_task:
        assert plan.new_task.payload["comment"]["body"] == text
        assert plan.new_task.idempotency_key == "Codertocat/Hello-World#1/comment/492700400"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("no command here", "the comment holds no command"),
        ("say /agent fix inline", "the comment holds no command"),
        ("email@agentqueue fix", "the comment holds no command"),
        ("/agent priority urgent", "/agent priority takes P0, P1, P2 or 0-9, not 'urgent'"),
        ("/agent dance", "unknown command 'dance' (known: cancel, fix, priority, retry, review)"),
    ],
)
def test_comments_without_a_valid_command_are_ignored(text: str, why: str) -> None:
    assert github.decide(RULE, "issue_comment", comment(text)) == github.Ignored(why)


def test_only_allowed_authors_are_heard() -> None:
    ignored = github.decide(RULE, "issue_comment", comment("/agent fix", "FIRST_TIMER"))
    assert isinstance(ignored, github.Ignored) and "Codertocat (FIRST_TIMER)" in ignored.reason
    pr = body("pull_request.opened", **{"pull_request.author_association": "CONTRIBUTOR"})
    assert isinstance(github.decide(RULE, "pull_request", pr), github.Ignored)
    edited = body("issue_comment.created", action="edited", **{"comment.body": "/agent fix"})
    assert isinstance(github.decide(RULE, "issue_comment", edited), github.Ignored)


def test_pull_requests_are_reviewed_at_their_head_and_drafts_wait() -> None:
    plan = github.decide(RULE, "pull_request", body("pull_request.synchronize"))
    assert isinstance(plan, github.Plan) and plan.new_task is not None
    sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert plan.head == sha and plan.review_type == "review" and plan.source == "pr"
    assert plan.new_task.idempotency_key == f"Codertocat/Hello-World#2@{sha}"
    assert plan.new_task.payload["head"] == {"ref": "changes", "sha": sha}
    draft = body("pull_request.opened", **{"pull_request.draft": True})
    assert isinstance(github.decide(RULE, "pull_request", draft), github.Ignored)
    closed = github.decide(RULE, "pull_request", body("pull_request.opened", action="closed"))
    assert isinstance(closed, github.Plan) and closed.state == "closed" and not closed.new_task


def test_a_field_of_the_wrong_type_is_named() -> None:
    with pytest.raises(ValidationError) as raised:
        github.decide(RULE, "issues", body("issues.opened", **{"issue.number": "one"}))
    assert [p.field for p in github_payload.problems(raised.value)] == ["issue.number"]
