"""Guardrails (R15): rules that hold matching work in blocked until an approver approves it.

Pure: a rule is matched against a task's title, payload, type, priority and kind; what to do
with a match (block with ``hold = 'approval'`` and the rule named) is the task pipeline's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded when a rule is compiled: most commands have none (start-up time)
    import regex

MATCH_TIMEOUT_SECS = 0.25
"""How long one pattern may search one field. A search that takes longer counts as a match: the
task is held for approval, so a rule that cannot decide hands the decision to a person rather
than letting the work through or keeping a submit waiting."""


@dataclass(frozen=True)
class Guardrail:
    """One rule: a case-insensitive regular expression and the work it applies to."""

    name: str
    pattern: regex.Pattern[str]  # searched with a time limit (MATCH_TIMEOUT_SECS)
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
        import regex

        return cls(
            name,
            regex.compile(pattern, regex.IGNORECASE),
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
    timed_out: bool = False  # the search took longer than MATCH_TIMEOUT_SECS

    @property
    def reason(self) -> str:
        """The blocked task's state_reason."""
        if self.timed_out:
            return (
                f"guardrail {self.rule.name!r} requires approval: its pattern took longer "
                f"than {MATCH_TIMEOUT_SECS}s on the {self.field}, which counts as found"
            )
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
        found = _search(rule, "title", title)
        if found:
            return found
        if body is None:
            body = payload_text(payload)
        found = _search(rule, "payload", body)
        if found:
            return found
    return None


def _search(rule: Guardrail, field: str, text: str) -> Match | None:
    try:
        found = rule.pattern.search(text, timeout=MATCH_TIMEOUT_SECS)
    except TimeoutError:
        return Match(rule, field, "", timed_out=True)
    return None if found is None else Match(rule, field, found.group(0))


def blow_up_problem(pattern: str) -> str | None:
    """Why ``pattern`` can take exponential time on some text, when that shows in its shape:
    an unbounded repetition whose body is itself only a repetition (``(a+)+``, ``(?:x*)*``,
    ``(a+|b)+``). Other slow patterns exist; the search's time limit bounds those."""
    try:
        parsed = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, OverflowError):
        return None  # the pattern's own check reports it
    if _nested_repeat(list(parsed)):
        return (
            "repeats a repetition directly, as in (a+)+, which can take exponential time "
            "on text that almost matches; repeat once (a+)"
        )
    return None


_REPEATS = frozenset({"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"})


def _nested_repeat(items: list[Any]) -> bool:
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            _, high, body = av
            if high > 1 and any(_only_repeat(list(b)) for b in _alternatives(list(body))):
                return True
            inner = [list(body)]
        elif name == "SUBPATTERN":
            inner = [list(av[-1])]
        elif name == "BRANCH":
            inner = [list(b) for b in av[1]]
        elif name in ("ASSERT", "ASSERT_NOT"):
            inner = [list(av[1])]
        else:
            continue
        if any(_nested_repeat(b) for b in inner):
            return True
    return False


def _alternatives(items: list[Any]) -> list[list[Any]]:
    """The sequences a body may be: itself, unwrapped from groups and split at ``|``."""
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        items = list(items[0][1][-1])
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        out: list[list[Any]] = []
        for branch in items[0][1][1]:
            out.extend(_alternatives(list(branch)))
        return out
    return [items]


def _only_repeat(items: list[Any]) -> bool:
    """A single repetition of a varying count (``a+``, ``a{1,3}``; not ``a{2}``)."""
    if len(items) != 1 or str(items[0][0]) not in _REPEATS:
        return False
    low, high, _ = items[0][1]
    return bool(high > 1 and low != high)
