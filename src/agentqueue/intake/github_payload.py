"""The few fields of GitHub's webhook payloads that intake reads, as permissive models: a
field not named here is ignored, a field named here must be there (unless it has a default)
and have its type, and a payload that breaks that is refused naming the field."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..domain.errors import FieldProblem


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class User(_Model):
    login: str


class Label(_Model):
    name: str


class Repository(_Model):
    full_name: str
    html_url: str | None = None
    url: str | None = None


class Issue(_Model):
    number: int
    title: str
    body: str | None = None
    state: str = "open"
    labels: list[Label] = []
    user: User | None = None
    author_association: str = "NONE"
    html_url: str | None = None
    url: str | None = None
    updated_at: datetime
    pull_request: dict[str, Any] | None = None
    """Present when the issue is a pull request (comments on pull requests come as issues)."""


class Comment(_Model):
    id: int
    body: str | None = None
    user: User
    author_association: str = "NONE"
    html_url: str | None = None
    url: str | None = None


class Ref(_Model):
    ref: str
    sha: str


class PullRequest(_Model):
    number: int
    title: str
    body: str | None = None
    state: str = "open"
    draft: bool = False
    labels: list[Label] = []
    user: User | None = None
    author_association: str = "NONE"
    html_url: str | None = None
    url: str | None = None
    updated_at: datetime
    head: Ref
    base: Ref


class IssuesEvent(_Model):
    action: str
    issue: Issue
    label: Label | None = None
    repository: Repository
    sender: User


class CommentEvent(_Model):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    sender: User


class PullRequestEvent(_Model):
    action: str
    pull_request: PullRequest
    label: Label | None = None
    repository: Repository
    sender: User


def problems(exc: ValidationError) -> list[FieldProblem]:
    """A payload's validation errors, each naming its field (``issue.number``)."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        message = "required" if err["type"] == "missing" else str(err["msg"])
        out.append(FieldProblem(loc.lstrip("."), message))
    return out
