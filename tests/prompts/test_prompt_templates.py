"""Prompt templates (R25) as the configuration takes them and the sandbox renders them: a
template that is not Jinja2, or that reaches outside the task it is given, is a configuration
error naming the template and the line; what slips past the load is refused at render, naming
the template; the template of a task is its task type's, else its kind's, else the default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentqueue.config import load_settings, settings_from
from agentqueue.domain.errors import ConfigError
from agentqueue.domain.models import Task
from agentqueue.prompts import PromptError, Prompts, PromptTemplate


def config_error(prompts: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        settings_from({"prompts": prompts})
    return str(caught.value)


def test_a_syntax_error_names_the_template_and_its_line() -> None:
    text = "Fix {{ title }}\n\n{% if payload.body %}\n{{ payload.body }}\n"
    assert config_error({"bugfix": {"template": text}}) == (
        "prompts.bugfix.template: line 4: Unexpected end of template. Jinja was looking for "
        "the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs to "
        "be closed is 'if'."
    )


def test_a_template_file_is_read_at_load_and_its_errors_name_the_file(tmp_path: Path) -> None:
    good = tmp_path / "mail.j2"
    good.write_text("Hello {{ assignee }}\n")
    settings = settings_from({"prompts": {"mail": {"file": str(good)}}})
    assert settings.prompts["mail"].text == "Hello {{ assignee }}\n"
    bad = tmp_path / "bad.j2"
    bad.write_text("line one\n{{ title }\n")
    message = config_error({"mail": {"file": str(bad)}})
    assert message.startswith("prompts.mail.file: line 2: unexpected '}'")
    assert message.endswith(f"({bad})")
    assert config_error({"mail": {"file": str(tmp_path / "none.j2")}}) == (
        f"prompts.mail.file: cannot read {tmp_path / 'none.j2'}: No such file or directory"
    )
    assert config_error({"mail": {}}).startswith("prompts.mail.template: give the template")
    both = {"template": "x", "file": str(good)}
    assert config_error({"mail": both}).startswith("prompts.mail.template: give the template")


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("{{ ''.__class__.__mro__ }}", 1, "'__mro__' is private"),
        ("ok\n{{ payload.items.__self__ }}", 2, "'__self__' is private"),
        ("{{ cycler.__init__.__globals__ }}", 1, "'__globals__' is private"),
        ("{{ title['__class__'] }}", 1, "'__class__' is private"),
        ("{{ payload._secret }}", 1, "'_secret' is private"),
        ('{% include "/etc/passwd" %}', 1, "cannot include, import or extend"),
        ('\n\n{% import "os" as os %}', 3, "cannot include, import or extend"),
        ('{% extends "/etc/hostname" %}', 1, "cannot include, import or extend"),
    ],
)
def test_a_template_reaching_outside_the_sandbox_is_refused_at_load(
    text: str, line: int, what: str
) -> None:
    message = config_error({"default": {"template": text}})
    assert message.startswith(f"prompts.default.template: line {line}: ")
    assert what in message


def task(**changes: Any) -> Task:
    fields: dict[str, Any] = {
        "id": "01a23052-4be4-7825-95c5-ead549b0cbe4",
        "tenant": "acme",
        "source": "api",
        "source_id": None,
        "title": "Fix the login",
        "task_type": "bugfix",
        "payload": {"body": "It fails", "n": 2},
        "priority": 1,
        "state": "executing",
        "max_retries": 3,
        "retry_count": 0,
        "timeout_secs": 60,
        "created_at": "2026-03-01T09:00:00+00:00",
        "updated_at": "2026-03-01T09:00:00+00:00",
        "eligible_at": "2026-03-01T09:00:00+00:00",
        "requested_by": "api",
        "lock_token": "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d",
    }
    fields.update(changes)
    return Task.from_json(fields)


@pytest.mark.parametrize(
    "text",
    [
        '{{ payload|attr("__class__") }}',
        '{{ (title|attr("__cla" ~ "ss__")) }}',
        '{{ payload.items|attr("__self__") }}',
    ],
)
def test_what_slips_past_the_load_is_refused_by_the_sandbox_naming_the_template(
    text: str,
) -> None:
    prompts = settings_from({"prompts": {"bugfix": {"template": text}}}).prompt_templates()
    with pytest.raises(PromptError) as caught:
        prompts.render_task(task())
    assert str(caught.value).startswith("prompts.bugfix: refused by the sandbox: access to ")
    assert "is unsafe" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{{ "x" * 100000000 }}', "a repetition longer than 1048576"),
        ("{{ [1, 2] * 10**7 }}", "a repetition longer than 1048576"),
        ("{{ 9 ** 9999999 }}", "an exponent larger than 1024"),
        ("{{ range(100000000) | list }}", "Range too big"),
        ("{% for _ in range(99999) %}{{ title * 20 }}{% endfor %}", "longer than 1048576"),
    ],
)
def test_a_template_cannot_make_a_prompt_too_big_to_hold(text: str, why: str) -> None:
    prompts = settings_from({"prompts": {"bugfix": {"template": text}}}).prompt_templates()
    with pytest.raises(PromptError) as caught:
        prompts.render_task(task())
    assert str(caught.value).startswith("prompts.bugfix: ") and why in str(caught.value)


def test_a_template_sees_the_task_as_its_agent_does_and_nothing_undefined() -> None:
    text = "{{ title }}|{{ payload.n * 2 }}|{{ task.priority }}|{{ id }}|{{ state }}\n"
    prompts = settings_from({"prompts": {"default": {"template": text}}}).prompt_templates()
    rendered = prompts.render_task(task())
    assert rendered == "Fix the login|4|1|01a23052-4be4-7825-95c5-ead549b0cbe4|executing\n"
    for hidden in ("{{ lock_token }}", "{{ task.lock_token }}", "{{ nothing }}"):
        prompts = settings_from({"prompts": {"default": {"template": hidden}}}).prompt_templates()
        with pytest.raises(PromptError) as caught:
            prompts.render_task(task())
        assert str(caught.value).startswith("prompts.default: ")
        assert "is undefined" in str(caught.value) or "has no attribute" in str(caught.value)


def test_the_task_type_s_template_then_the_kind_s_then_the_default() -> None:
    prompts = Prompts({name: PromptTemplate(name, name) for name in ("bugfix", "mail", "default")})
    assert prompts.render_task(task(task_type="bugfix", kind="mail")) == "bugfix"
    assert prompts.render_task(task(task_type="note", kind="mail")) == "mail"
    assert prompts.render_task(task(task_type="note")) == "default"
    assert Prompts({"mail": PromptTemplate("mail", "m")}).render_task(task()) is None


PROBE = """
import json, sys
from agentqueue.config import load_settings
from agentqueue.worker.assemble import build_executors
settings = load_settings(sys.argv[1])
executors = build_executors(settings, {}, concurrency=1)
print(json.dumps([len(executors), "jinja2" in sys.modules]))
"""


def test_a_worker_without_prompts_does_not_import_jinja2(tmp_path: Path) -> None:
    config = tmp_path / "agentqueue.toml"
    agent = f'command = ["{sys.executable}", "-c", "print(1)"]\ntask_types = ["x"]\n'
    config.write_text(f'[worker]\nworkdir = "{tmp_path}"\n[agents.a]\n{agent}isolation = "none"\n')
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True, timeout=60
    )
    assert json.loads(done.stdout) == [1, False], done.stderr
    assert load_settings(config).prompts == {}


def test_the_example_coding_agent_configuration_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/agents/coding-agents.toml is not run (its tools are not here), but it is a
    configuration the queue takes, with the templates it names (from the repository's root,
    where its relative paths start)."""
    root = Path(__file__).parents[2]
    monkeypatch.chdir(root)
    examples = root / "examples" / "agents"
    settings = load_settings(examples / "coding-agents.toml")
    assert sorted(settings.agents) == ["aider", "claude", "codex"]
    assert sorted(settings.prompts) == ["bugfix", "default", "mail"]
    for agent in settings.agents.values():
        assert agent.command[:2] == ["python3", "examples/agents/prompt_runner.py"]
