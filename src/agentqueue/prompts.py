"""Prompt templates (R25): the instruction a command agent reads, per task type and per kind.

A template is Jinja2 text rendered in Jinja2's sandbox with ``StrictUndefined``: it sees the task
as its agent sees it in ``task.json`` (each field a variable: ``title``, ``payload``,
``task_type``, ``assignee``, ... and the whole as ``task``) and nothing else. It cannot include,
import or extend other templates (there is no loader: nothing to read files with), nor name an
attribute or key starting with ``_`` (``''.__class__``); both are refused when the configuration
is loaded, naming the template and the line, and the sandbox refuses at render what slips past.

The template for a task is ``[prompts.<task_type>]``, else ``[prompts.<kind>]``, else
``[prompts.default]``; with none of them the task has no prompt. Jinja2 is imported on the first
template checked or rendered, never when no prompt is configured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .domain.envelope import agent_view
from .domain.models import Task

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import SandboxedEnvironment

DEFAULT = "default"
"""The template of a task whose task type and kind have none of their own."""


class PromptError(Exception):
    """A template that cannot be used or rendered; the message names it (and the line)."""


@dataclass(frozen=True)
class PromptTemplate:
    """One configured template: ``name`` is its key under ``[prompts]``, ``origin`` where its
    text came from (the setting, or the file it names)."""

    name: str
    text: str
    origin: str = ""

    @property
    def label(self) -> str:
        """How messages name it: ``prompts.bugfix`` (and its file)."""
        where = f"prompts.{self.name}"
        return f"{where} ({self.origin})" if self.origin else where


MAX_PROMPT_CHARS = 1024 * 1024
"""The longest prompt a template may render (1 Mi characters); longer fails the attempt."""

_MAX_POWER = 1024
"""The largest exponent ``**`` takes in a template."""


def _environment() -> SandboxedEnvironment:
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import SandboxedEnvironment

    class Sandbox(SandboxedEnvironment):
        """The sandbox, and no text, list or number made too big to hold by ``*`` or ``**``."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**":
                if isinstance(right, int | float) and abs(right) > _MAX_POWER:
                    raise SecurityError(f"an exponent larger than {_MAX_POWER}")
                return left**right
            for seq, times in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(times, int)
                if sized and len(seq) * times > MAX_PROMPT_CHARS:
                    raise SecurityError(f"a repetition longer than {MAX_PROMPT_CHARS}")
            return left * right

    # Plain text out: no HTML escaping, and the text ends as the template ends.
    return Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def check(name: str, text: str) -> None:
    """Refuse a template that is not valid Jinja2 or reaches outside what it is given;
    PromptError naming ``name`` and the line."""
    from jinja2 import TemplateSyntaxError, nodes

    try:
        tree = _environment().parse(text)
    except TemplateSyntaxError as exc:
        raise PromptError(f"line {exc.lineno}: {exc.message}") from None
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        raise PromptError(
            f"line {node.lineno}: a prompt template cannot include, import or extend another "
            "template (it is given the task, nothing else)"
        )
    keys: list[tuple[Any, int]] = [(n.attr, n.lineno) for n in tree.find_all(nodes.Getattr)]
    for item in tree.find_all(nodes.Getitem):
        if isinstance(item.arg, nodes.Const):
            keys.append((item.arg.value, item.lineno))
    for key, line in sorted(keys, key=lambda k: k[1]):
        if isinstance(key, str) and key.startswith("_"):
            raise PromptError(
                f"line {line}: {key!r} is private; a prompt template may read the task's "
                "fields and payload only"
            )


class Prompts:
    """The configured templates, compiled on first use."""

    def __init__(self, templates: Mapping[str, PromptTemplate]) -> None:
        self.templates = dict(templates)
        self._compiled: dict[str, Template] = {}
        self._env: SandboxedEnvironment | None = None

    def __bool__(self) -> bool:
        return bool(self.templates)

    def for_task(self, task_type: str, kind: str) -> PromptTemplate | None:
        """The template of a task of ``task_type`` and ``kind`` (None: it has no prompt)."""
        for name in (task_type, kind, DEFAULT):
            found = self.templates.get(name)
            if found is not None:
                return found
        return None

    def render_task(self, task: Task) -> str | None:
        """The prompt of ``task`` (None: no template applies to it); PromptError naming the
        template if it cannot be rendered for this task."""
        template = self.for_task(task.task_type, task.kind)
        if template is None:
            return None
        # The fields as task.json gives them (ids and times as text): the prompt says what
        # the agent reads there.
        view = json.loads(json.dumps(agent_view(task), ensure_ascii=False, default=str))
        return self.render(template, view)

    def render(self, template: PromptTemplate, view: Mapping[str, Any]) -> str:
        """``template`` rendered with ``view`` (the task as its agent sees it); PromptError
        naming the template when it uses what the task does not have, or what the sandbox
        refuses."""
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError, UndefinedError

        compiled = self._compiled.get(template.name)
        if compiled is None:
            if self._env is None:
                self._env = _environment()
            try:
                compiled = self._env.from_string(template.text)
            except TemplateError as exc:  # checked at load: only if the text changed since
                raise PromptError(f"{template.label}: {exc}") from None
            self._compiled[template.name] = compiled
        try:
            text = compiled.render({**view, "task": dict(view)})
        except SecurityError as exc:
            raise PromptError(f"{template.label}: refused by the sandbox: {exc}") from None
        except UndefinedError as exc:
            raise PromptError(f"{template.label}: {exc.message}") from None
        except (TemplateError, ArithmeticError, TypeError, ValueError, LookupError) as exc:
            raise PromptError(f"{template.label}: {type(exc).__name__}: {exc}") from None
        if len(text) > MAX_PROMPT_CHARS:
            raise PromptError(
                f"{template.label}: the prompt is longer than {MAX_PROMPT_CHARS} characters "
                f"({len(text)})"
            )
        return text
