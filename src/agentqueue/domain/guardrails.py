"""Guardrails (R15): rules that hold matching work in blocked until an approver approves it.

Pure: a rule is matched against a task's title, payload, type, priority and kind; what to do
with a match (block with ``hold = 'approval'`` and the rule named) is the task pipeline's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Guardrail:
    """One rule: a case-insensitive regular expression and the work it applies to."""

    name: str
    pattern: re.Pattern[str]
    applies_to: frozenset[str]
    task_types: frozenset[str] | None = None
    priorities: frozenset[int] | None = None
    approvers: frozenset[str] | None = None

    @classmethod
    def compile(
        cls,
        name: str,
        pattern: str,
        applies_to: Iterable[str] = ("task",),
        task_types: Iterable[str] | None = None,
        priorities: Iterable[int] | None = None,
        approvers: Iterable[str] | None = None,
    ) -> Guardrail:
        """A rule from its configured values."""
        return cls(
            name,
            re.compile(pattern, re.IGNORECASE),
            frozenset(applies_to),
            None if task_types is None else frozenset(task_types),
            None if priorities is None else frozenset(priorities),
            None if approvers is None else frozenset(approvers),
        )

    def applies(self, kind: str, task_type: str, priority: int) -> bool:
        """Whether the rule looks at work of this kind, type and priority at all."""
        return (
            kind in self.applies_to
            and (self.task_types is None or task_type in self.task_types)
            and (self.priorities is None or priority in self.priorities)
        )


@dataclass(frozen=True)
class Match:
    """A rule that matched, and where."""

    rule: Guardrail
    field: str  # "title" or "payload"
    text: str  # what the pattern found

    @property
    def reason(self) -> str:
        """The blocked task's state_reason."""
        return (
            f"guardrail {self.rule.name!r} requires approval: "
            f"{self.text!r} found in the {self.field}"
        )


def payload_text(payload: Any) -> str:
    """The payload as the rules read it: its JSON with non-ASCII kept (so "删掉" is found)."""
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)


def first_match(
    rules: Sequence[Guardrail],
    *,
    kind: str,
    task_type: str,
    priority: int,
    title: str,
    payload: Any,
) -> Match | None:
    """The first rule (in configured order) that applies and whose pattern is found."""
    body: str | None = None
    for rule in rules:
        if not rule.applies(kind, task_type, priority):
            continue
        found = rule.pattern.search(title)
        if found:
            return Match(rule, "title", found.group(0))
        if body is None:
            body = payload_text(payload)
        found = rule.pattern.search(body)
        if found:
            return Match(rule, "payload", found.group(0))
    return None
