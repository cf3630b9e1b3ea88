"""The configuration's environment overrides (agentqueue.envsettings), rule by rule, and the
defaults built without validation (config.default_settings) against the validated ones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentqueue.config import (
    TEXT_FIELDS,
    Settings,
    default_settings,
    environment,
    load_settings,
    settings_from,
)
from agentqueue.domain.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_agentqueue_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("AGENTQUEUE_"):
            monkeypatch.delenv(name)


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[tuple[str, str]]:
    return [(p.field, p.message) for p in exc.value.problems]


def test_prefix_and_field_name_set_a_top_level_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_DB", "sqlite:///from-env.db")
    monkeypatch.setenv("OTHER_DB", "sqlite:///not-ours.db")
    assert load_settings().db == "sqlite:///from-env.db"


def test_prefix_variables_that_name_no_field_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AGENTQUEUE_CONFIG, AGENTQUEUE_ACTOR and the like are read by others, not refused."""
    monkeypatch.setenv("AGENTQUEUE_ACTOR", "someone")
    monkeypatch.setenv("AGENTQUEUE_NO_SUCH_SETTING", "1")
    assert environment() == {}
    assert load_settings() == Settings()


def test_names_are_matched_without_regard_to_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("agentqueue_queue__Lease_TTL_secs", "7")
    monkeypatch.setenv("AgentQueue_Db", "sqlite:///mixed.db")
    settings = load_settings()
    assert settings.queue.lease_ttl_secs == 7.0
    assert settings.db == "sqlite:///mixed.db"


def test_double_underscore_descends_into_a_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE__LEASE_TTL_SECS", "5")
    monkeypatch.setenv("AGENTQUEUE_QUEUE__ADMIT_ON_SUBMIT", "false")
    monkeypatch.setenv("AGENTQUEUE_SCHEDULER__TICK_SECS", "0.5")
    settings = load_settings()
    assert settings.queue.lease_ttl_secs == 5.0  # text, converted by validation
    assert settings.queue.admit_on_submit is False
    assert settings.scheduler.tick_secs == 0.5
    assert settings.queue.claim_batch is None  # the rest of the section keeps its defaults


def test_double_underscore_descends_into_a_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__BUGFIX__TIMEOUT_SECS", "50")
    monkeypatch.setenv("AGENTQUEUE_RATE_LIMITS__SLOW__PER_MINUTE", "6")
    settings = load_settings()
    assert settings.task_types["bugfix"].timeout_secs == 50
    assert settings.rate_limits["slow"].per_minute == 6.0


def test_a_complex_value_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE", '{"lease_ttl_secs": 9}')
    monkeypatch.setenv("AGENTQUEUE_ADMISSION__TENANT_WEIGHTS", '{"big": 2}')
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__DOCS", '{"timeout_secs": 4}')
    monkeypatch.setenv("AGENTQUEUE_AGENTS__A__COMMAND", '["/bin/true", "--x"]')
    monkeypatch.setenv("AGENTQUEUE_AGENTS__A__TASK_TYPES", '["docs"]')
    settings = load_settings()
    assert settings.queue.lease_ttl_secs == 9.0
    assert settings.admission.tenant_weights == {"big": 2.0}
    assert settings.task_types["docs"].timeout_secs == 4
    assert settings.agents["a"].command == ["/bin/true", "--x"]


def test_a_sections_json_and_its_keys_are_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE", '{"lease_ttl_secs": 9, "claim_batch": 2}')
    monkeypatch.setenv("AGENTQUEUE_QUEUE__CLAIM_BATCH", "3")
    settings = load_settings()
    assert (settings.queue.lease_ttl_secs, settings.queue.claim_batch) == (9.0, 3)


def test_a_complex_value_that_is_not_json_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE", "lease_ttl_secs=9")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert problems(exc)[0][0] == "AGENTQUEUE_QUEUE"
    assert "JSON" in problems(exc)[0][1]
    monkeypatch.delenv("AGENTQUEUE_QUEUE")
    monkeypatch.setenv("agentqueue_agents__a__command", "/bin/true")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert problems(exc)[0][0] == "AGENTQUEUE_AGENTS__A__COMMAND"


def test_a_table_entry_that_is_not_json_is_refused_by_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__DOCS", "{timeout_secs: 4}")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert [f for f, _ in problems(exc)] == ["task_types.docs"]


def test_unknown_nested_keys_are_errors_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE__LEASE_TTL", "5")
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__DOCS__TIMEOUT", "5")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert sorted(problems(exc)) == [
        ("queue.lease_ttl", "unknown setting"),
        ("task_types.docs.timeout", "unknown setting"),
    ]


def test_every_double_underscore_descends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__DOCS__TIMEOUT_SECS__MORE", "5")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert [f for f, _ in problems(exc)] == ["task_types.docs.timeout_secs"]


def test_agentqueue_api_is_not_the_api_section_but_its_keys_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQUEUE_API", "http://127.0.0.1:8077")
    assert load_settings().api == Settings().api
    monkeypatch.setenv("AGENTQUEUE_API__PORT", "9999")
    assert load_settings().api.port == 9999


def test_environment_beats_file_beats_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "agentqueue.toml"
    config.write_text(
        'db = "sqlite:///file.db"\n[queue]\nlease_ttl_secs = 20\nclaim_batch = 4\n'
        "[task_types.docs]\ntimeout_secs = 60\nbroadcast = 2\n"
    )
    settings = load_settings(config)
    assert (settings.db, settings.queue.lease_ttl_secs, settings.queue.claim_batch) == (
        "sqlite:///file.db",
        20.0,
        4,
    )
    assert settings.queue.deadline_grace_secs == Settings().queue.deadline_grace_secs
    monkeypatch.setenv("AGENTQUEUE_DB", "sqlite:///env.db")
    monkeypatch.setenv("AGENTQUEUE_QUEUE__LEASE_TTL_SECS", "25")
    monkeypatch.setenv("AGENTQUEUE_TASK_TYPES__DOCS__TIMEOUT_SECS", "70")
    settings = load_settings(config)
    assert settings.db == "sqlite:///env.db"
    assert (settings.queue.lease_ttl_secs, settings.queue.claim_batch) == (25.0, 4)
    assert (settings.task_types["docs"].timeout_secs, settings.task_types["docs"].broadcast) == (
        70,
        2,
    )
    assert settings.source == config.resolve()


def test_a_list_from_the_environment_replaces_the_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "agentqueue.toml"
    config.write_text('[approval]\napprovers = ["ann", "bob"]\n')
    monkeypatch.setenv("AGENTQUEUE_APPROVAL__APPROVERS", '["cy"]')
    assert load_settings(config).approval.approvers == ["cy"]


def test_file_sections_are_matched_without_regard_to_case() -> None:
    settings = settings_from({"QUEUE": {"lease_ttl_secs": 5}})
    assert settings.queue.lease_ttl_secs == 5.0
    with pytest.raises(ConfigError) as exc:
        settings_from({"queue": {"Lease_TTL_Secs": 5}})  # below the top level: as written
    assert problems(exc) == [("queue.Lease_TTL_Secs", "unknown setting")]


def test_settings_built_directly_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE__CLAIM_BATCH", "8")
    settings = Settings(queue={"claim_batch": 2, "lease_ttl_secs": 12})
    assert (settings.queue.claim_batch, settings.queue.lease_ttl_secs) == (8, 12.0)


def _fields_set(model: BaseModel) -> Any:
    """Each model's set fields, recursively (what ``exclude_unset`` dumps go by)."""
    nested = {
        name: _fields_set(value)
        for name, value in model.__dict__.items()
        if isinstance(value, BaseModel)
    }
    return (sorted(model.model_fields_set), nested)


def test_the_defaults_built_without_validation_are_the_validated_defaults() -> None:
    built, validated = default_settings(), Settings()
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert _fields_set(built) == _fields_set(validated)
    assert built.source is None and validated.source is None
    assert settings_from({}) == validated


def test_a_text_field_from_the_environment_keeps_the_defaults_unvalidated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in TEXT_FIELDS:
        assert str(Settings.model_fields[name].annotation) in ("str | None", "Optional[str]")
    monkeypatch.setenv("AGENTQUEUE_DB", "sqlite:///x.db")
    built = load_settings()
    validated = Settings()
    assert built == validated and _fields_set(built) == _fields_set(validated)
    assert built.db == "sqlite:///x.db"


def test_plain_gives_what_model_dump_gives(tmp_path: Path) -> None:
    """The long-running commands hand ``plain(settings)`` to the log masking (so no serializer
    is built at start); it must be the very data ``model_dump(mode="json")`` gives: every
    section, nested models in tables and lists, paths as text, the defaults too."""
    from agentqueue.config import plain

    prompt = tmp_path / "bugfix.md"
    prompt.write_text("Fix {{ task.title }}\n")
    settings = settings_from(
        {
            "db": "postgresql://app:pw@db.example/aq",
            "task_types": {"bugfix": {"timeout_secs": 60}},
            "agents": {
                "fixer": {"command": ["true"], "task_types": ["bugfix"], "labels": ["py"]},
            },
            "rate_limits": {"bugfix": {"per_minute": 5}},
            "guardrails": [{"name": "money", "pattern": "refund", "task_types": ["bugfix"]}],
            "callbacks": {"secret_env": "HOOK_SECRET"},
            "intake": {
                "github": [{"repository": "octo/repo", "tenant": "acme", "secret_env": "GH_SECRET"}]
            },
            "prompts": {"bugfix": {"file": str(prompt)}, "default": {"template": "Do it"}},
            "audit": {"anchor_file": str(tmp_path / "anchors.jsonl")},
        }
    )
    dumped = settings.model_dump(mode="json")
    assert plain(settings) == dumped
    assert dumped["prompts"]["bugfix"]["file"] == str(prompt)  # a path, as text
    assert dumped["intake"]["github"][0]["repository"] == "octo/repo"  # a model in a list
    assert plain(default_settings()) == Settings().model_dump(mode="json")
