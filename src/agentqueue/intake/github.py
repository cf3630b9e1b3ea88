"""GitHub webhooks (R18): which rule a delivery falls under, whether its signature holds, and
what it asks for. Pure: no I/O, no clock, no environment (secrets are handed in).

:func:`verify` checks ``X-Hub-Signature-256`` against the secrets of the rules whose repository
glob matches the delivery's repository; :func:`decide` reads the few fields a trigger needs
with the permissive models of ``github_payload`` (unknown fields are ignored, the fields read
must have their types) and
returns a :class:`Plan`, or an :class:`Ignored` saying why nothing is done. Applying a plan is
``service.intake``'s, in one transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any, Literal

from ..config import GitHubRule
from .github_payload import (
    Comment,
    CommentEvent,
    Issue,
    IssuesEvent,
    Label,
    PullRequest,
    PullRequestEvent,
    Ref,
    Repository,
)

EVENTS = frozenset({"issues", "issue_comment", "pull_request", "ping"})
"""The events handled; any other is answered 202 and ignored."""
SIGNATURE_PREFIX = "sha256="
TITLE_MAX = 256
BODY_MAX = 16_384
"""The most of an issue's, pull request's or comment's text a task's payload keeps."""


# --- signatures -----------------------------------------------------------------------------


def signature(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body`` signed with ``secret``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def signed_with(secret: str, body: bytes, given: str) -> bool:
    """Whether ``given`` is ``body``'s signature with ``secret`` (compared in constant time)."""
    return hmac.compare_digest(signature(secret, body).encode(), given.strip().encode())


def _glob_owner(rule: GitHubRule) -> str:
    return rule.repository.partition("/")[0]


def rules_for(rules: Sequence[GitHubRule], target: Target) -> list[GitHubRule]:
    """The rules whose glob matches the delivery's repository (or, for an organization's
    ``ping``, which names no repository, whose glob's owner part matches the organization)."""
    if target.repository is not None:
        name = target.repository.lower()
        return [r for r in rules if fnmatchcase(name, r.repository.lower())]
    if target.owner is not None:
        owner = target.owner.lower()
        return [r for r in rules if fnmatchcase(owner, _glob_owner(r).lower())]
    return []


def verify(
    rules: Sequence[GitHubRule],
    secret_of: Callable[[GitHubRule], str | None],
    body: bytes,
    given: str,
) -> GitHubRule | None:
    """The first of ``rules`` whose secret signs ``body`` as ``given`` says, or None.

    ``secret_of`` gives a rule's secret (None when its variable is not set: that rule verifies
    nothing). Each rule is tried, so no secret is told apart by timing from another."""
    found = None
    for rule in rules:
        secret = secret_of(rule)
        if secret and signed_with(secret, body, given) and found is None:
            found = rule
    return found


@dataclass(frozen=True)
class Target:
    """What a delivery's body says it is about, read before it is trusted (to choose the
    secrets that may sign it): ``owner/name``, or only the owner (an organization's ping)."""

    repository: str | None
    owner: str | None


def target_of(body: object) -> Target:
    """The repository (or organization) a parsed body names; both None if it names neither."""
    if not isinstance(body, dict):
        return Target(None, None)
    repo = body.get("repository")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        full = repo["full_name"]
        return Target(full, full.partition("/")[0])
    org = body.get("organization")
    if isinstance(org, dict) and isinstance(org.get("login"), str):
        return Target(None, org["login"])
    return Target(None, None)


# --- what a delivery asks for ---------------------------------------------------------------

Command = Literal["cancel", "retry", "priority"]


@dataclass(frozen=True)
class NewTask:
    """The task a trigger asks for (if its issue or pull request has no live task)."""

    task_type: str
    title: str
    priority: int
    idempotency_key: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """What one delivery does to one issue or pull request (``source_id`` ``owner/repo#N``).

    ``at`` is the issue's or pull request's ``updated_at`` in the payload: the order the
    service keeps. ``state`` is set by closed and reopened; ``head`` by a pull request's review
    triggers (the commit to review: an older one than the last seen is ignored, a newer one
    supersedes the live review of the older).
    """

    tenant: str
    source: str
    source_id: str
    actor: str
    at: datetime
    trigger: str
    state: Literal["open", "closed"] | None = None
    head: str | None = None
    new_task: NewTask | None = None
    command: Command | None = None
    priority: int | None = None
    review_type: str | None = None


@dataclass(frozen=True)
class Ignored:
    """Nothing to do, and why (answered and logged)."""

    reason: str


@dataclass(frozen=True)
class Pong:
    """A ping: the webhook works."""

    zen: str | None = None


Decision = Plan | Ignored | Pong


@dataclass(frozen=True)
class _Subject:
    """The issue or pull request a delivery is about, as the plan and the payload use it."""

    source: str
    source_id: str
    number: int
    title: str
    body: str | None
    state: str
    labels: list[str]
    author: str | None
    association: str
    html_url: str | None
    api_url: str | None
    updated_at: datetime
    head: Ref | None = None
    base: Ref | None = None
    draft: bool = False
    context: dict[str, Any] = field(default_factory=dict)

    def payload(self, repo: Repository, comment: Comment | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "repository": {"full_name": repo.full_name, "html_url": repo.html_url},
            "number": self.number,
            "kind": self.source,
            "title": self.title,
            "body": _clip(self.body),
            "labels": self.labels,
            "author": self.author,
            "html_url": self.html_url,
            "api_url": self.api_url,
            "updated_at": self.updated_at.isoformat(),
        }
        if self.head is not None and self.base is not None:
            out["head"] = {"ref": self.head.ref, "sha": self.head.sha}
            out["base"] = {"ref": self.base.ref, "sha": self.base.sha}
        if comment is not None:
            out["comment"] = {
                "id": comment.id,
                "body": _clip(comment.body),
                "author": comment.user.login,
                "html_url": comment.html_url,
            }
        return out


def _clip(text: str | None) -> str | None:
    return None if text is None else text[:BODY_MAX]


def _issue_subject(repo: Repository, issue: Issue) -> _Subject:
    is_pr = issue.pull_request is not None
    return _Subject(
        source="pr" if is_pr else "issue",
        source_id=f"{repo.full_name}#{issue.number}",
        number=issue.number,
        title=issue.title,
        body=issue.body,
        state=issue.state,
        labels=[label.name for label in issue.labels],
        author=issue.user.login if issue.user else None,
        association=issue.author_association,
        html_url=issue.html_url,
        api_url=issue.url,
        updated_at=issue.updated_at,
    )


def _pr_subject(repo: Repository, pr: PullRequest) -> _Subject:
    return _Subject(
        source="pr",
        source_id=f"{repo.full_name}#{pr.number}",
        number=pr.number,
        title=pr.title,
        body=pr.body,
        state=pr.state,
        labels=[label.name for label in pr.labels],
        author=pr.user.login if pr.user else None,
        association=pr.author_association,
        html_url=pr.html_url,
        api_url=pr.url,
        updated_at=pr.updated_at,
        head=pr.head,
        base=pr.base,
        draft=pr.draft,
    )


def _priority(rule: GitHubRule, labels: Sequence[str]) -> int:
    found = [rule.priority_labels[name] for name in labels if name in rule.priority_labels]
    return min(found) if found else 5


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Builder:
    """Plans for one delivery under one rule."""

    def __init__(self, rule: GitHubRule, repo: Repository, subject: _Subject, actor: str):
        self.rule = rule
        self.repo = repo
        self.s = subject
        self.actor = actor

    def plan(self, trigger: str, **fields: Any) -> Plan:
        return Plan(
            tenant=self.rule.tenant,
            source=self.s.source,
            source_id=self.s.source_id,
            actor=self.actor,
            at=self.s.updated_at,
            trigger=trigger,
            **fields,
        )

    def task(
        self, task_type: str, key: str, comment: Comment | None = None, trigger: str = ""
    ) -> NewTask:
        return NewTask(
            task_type=task_type,
            title=self.s.title[:TITLE_MAX].strip() or self.s.source_id,
            priority=_priority(self.rule, self.s.labels),
            idempotency_key=f"{self.s.source_id}{key}",
            payload={**self.s.payload(self.repo, comment), "trigger": trigger},
        )

    def untrusted(self, who: str, association: str, what: str) -> Ignored | None:
        if association in self.rule.authors:
            return None
        allowed = ", ".join(self.rule.authors)
        return Ignored(f"{what} by {who} ({association}) is not acted on: allowed are {allowed}")

    def closed_now(self) -> Ignored | None:
        if self.s.state == "closed":
            return Ignored(f"{self.s.source_id} is closed")
        return None

    def by_label(self, label: str, trigger: str) -> Plan | Ignored:
        if label in self.rule.priority_labels:
            return self.plan(trigger, command="priority", priority=self.rule.priority_labels[label])
        task_type = self.rule.labels.get(label)
        if task_type is None:
            return Ignored(f"label {label!r} is not a trigger")
        key = f"/labeled@{_when(self.s.updated_at)}"
        return self.plan(trigger, new_task=self.task(task_type, key, trigger=trigger))

    def review(self, trigger: str) -> Plan | Ignored:
        if not self.rule.review_pull_requests:
            return Ignored("pull request reviews are off for this repository")
        if self.s.draft:
            return Ignored(f"{self.s.source_id} is a draft: its review waits for ready_for_review")
        assert self.s.head is not None
        sha = self.s.head.sha
        new = self.task(self.rule.review_task_type, f"@{sha}", trigger=trigger)
        return self.plan(trigger, head=sha, new_task=new, review_type=self.rule.review_task_type)


def decide(rule: GitHubRule, event: str, body: Mapping[str, Any]) -> Decision:
    """What a verified delivery of ``event`` asks for under ``rule``.

    Raises ValidationError (see :func:`.github_payload.problems`) when a field it reads is
    missing or of the wrong type."""
    if event == "ping":
        zen = body.get("zen")
        return Pong(zen if isinstance(zen, str) else None)
    if event == "issues":
        return _issues(rule, IssuesEvent.model_validate(body))
    if event == "issue_comment":
        return _comment(rule, CommentEvent.model_validate(body))
    if event == "pull_request":
        return _pull_request(rule, PullRequestEvent.model_validate(body))
    return Ignored(f"event {event} is not handled")


def _issues(rule: GitHubRule, ev: IssuesEvent) -> Decision:
    subject = _issue_subject(ev.repository, ev.issue)
    b = _Builder(rule, ev.repository, subject, ev.sender.login)
    trigger = f"issues.{ev.action}"
    if ev.action == "closed":
        return b.plan(trigger, state="closed")
    if ev.action in ("opened", "reopened"):
        untrusted = b.untrusted(ev.sender.login, ev.issue.author_association, f"{ev.action}")
        if untrusted:
            # A reopening is still recorded (it orders a close that arrives late).
            return b.plan(trigger, state="open") if ev.action == "reopened" else untrusted
        wanted = [name for name in subject.labels if name in rule.labels]
        if not wanted:
            why = Ignored(f"{subject.source_id} carries no trigger label")
            return b.plan(trigger, state="open") if ev.action == "reopened" else why
        key = f"/{ev.action}@{_when(subject.updated_at)}"
        task = b.task(rule.labels[wanted[0]], key, trigger=trigger)
        return b.plan(trigger, state="open", new_task=task)
    if ev.action == "labeled":
        return _labeled(b, ev.label, ev.sender.login, ev.issue.author_association, trigger)
    return Ignored(f"issues action {ev.action} is not handled")


def _labeled(
    b: _Builder, label: Label | None, sender: str, association: str, trigger: str
) -> Plan | Ignored:
    if label is None:
        return Ignored("the delivery names no label")
    closed = b.closed_now()
    if closed:
        return closed
    # Labelling someone else's issue takes triage access on GitHub, so only a label the
    # author put on their own issue (an issue template does, for anyone) needs the check.
    if sender == b.s.author:
        untrusted = b.untrusted(sender, association, f"label {label.name!r}")
        if untrusted:
            return untrusted
    return b.by_label(label.name, trigger)


_COMMAND = re.compile(r"^\s*/agent\s+([A-Za-z][\w-]*)(?:[ \t]+(\S+))?", re.MULTILINE)


def _words(rule: GitHubRule, text: str) -> tuple[str, str | None] | None:
    """The first ``/agent WORD [ARG]`` line of ``text``, or ``@handle WORD [ARG]``."""
    found = _COMMAND.search(text)
    if found is None and rule.mention:
        mention = re.compile(
            rf"(?<![\w@-]){re.escape(rule.mention)}\s+([A-Za-z][\w-]*)(?:[ \t]+(\S+))?",
            re.IGNORECASE,
        )
        found = mention.search(text)
    if found is None:
        return None
    return found.group(1).lower(), found.group(2)


def _comment(rule: GitHubRule, ev: CommentEvent) -> Decision:
    subject = _issue_subject(ev.repository, ev.issue)
    who = ev.comment.user.login
    b = _Builder(rule, ev.repository, subject, who)
    if ev.action != "created":
        return Ignored(f"issue_comment action {ev.action} is not handled (only new comments)")
    words = _words(rule, ev.comment.body or "")
    if words is None:
        return Ignored("the comment holds no command")
    word, arg = words
    untrusted = b.untrusted(who, ev.comment.author_association, f"command {word!r}")
    if untrusted:
        return untrusted
    trigger = f"comment {ev.comment.id}: {word}"
    if word in ("cancel", "retry"):
        return b.plan(trigger, command=word)
    if word == "priority":
        level = _level(arg)
        if level is None:
            return Ignored(f"/agent priority takes P0, P1, P2 or 0-9, not {arg!r}")
        return b.plan(trigger, command="priority", priority=level)
    task_type = rule.commands.get(word)
    if task_type is None:
        known = ", ".join(sorted({*rule.commands, "cancel", "retry", "priority"}))
        return Ignored(f"unknown command {word!r} (known: {known})")
    closed = b.closed_now()
    if closed:
        return closed
    task = b.task(task_type, f"/comment/{ev.comment.id}", ev.comment, trigger)
    return b.plan(trigger, new_task=task)


def _level(arg: str | None) -> int | None:
    if arg is None:
        return None
    text = arg.strip().upper()
    names = {"P0": 0, "P1": 5, "P2": 9}
    if text in names:
        return names[text]
    return int(text) if text.isdigit() and 0 <= int(text) <= 9 else None


def _pull_request(rule: GitHubRule, ev: PullRequestEvent) -> Decision:
    subject = _pr_subject(ev.repository, ev.pull_request)
    b = _Builder(rule, ev.repository, subject, ev.sender.login)
    trigger = f"pull_request.{ev.action}"
    pr = ev.pull_request
    if ev.action == "closed":
        return b.plan(trigger, state="closed")
    if ev.action in ("opened", "reopened", "ready_for_review", "synchronize"):
        untrusted = b.untrusted(
            pr.user.login if pr.user else ev.sender.login, pr.author_association, "pull request"
        )
        if untrusted:
            return b.plan(trigger, state="open") if ev.action == "reopened" else untrusted
        if ev.action != "reopened":
            closed = b.closed_now()
            if closed:
                return closed
        planned = b.review(trigger)
        if ev.action == "reopened":
            if isinstance(planned, Ignored):
                return b.plan(trigger, state="open")
            return replace(planned, state="open")
        return planned
    if ev.action == "labeled":
        return _labeled(b, ev.label, ev.sender.login, pr.author_association, trigger)
    return Ignored(f"pull_request action {ev.action} is not handled")
