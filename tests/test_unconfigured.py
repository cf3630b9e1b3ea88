"""An unconfigured process (agentqueue.unconfigured): told from the variables' names alone, it
must agree with what the configuration reads from them, and a queue built on it must hold the
very settings, database and audit keys that loading the configuration gives."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentqueue import config
from agentqueue.domain.audit import AuditKey, Keyring, install_keys, installed_keys
from agentqueue.domain.errors import ConfigError
from agentqueue.queue import AsyncQueue
from agentqueue.unconfigured import FIELDS, TEXT_FIELD, WHOLE_EXCLUDED, default_db


@pytest.fixture(autouse=True)
def _no_agentqueue_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.lower().startswith("agentqueue_"):
            monkeypatch.delenv(name)


def test_the_names_are_the_configurations() -> None:
    assert set(config.Settings.model_fields) == FIELDS
    assert config.WHOLE_EXCLUDED == WHOLE_EXCLUDED
    assert {TEXT_FIELD} == config.TEXT_FIELDS
    assert config.default_settings().audit.keyring() == Keyring()


HEADS = [*sorted(config.Settings.model_fields), "config", "actor", "token", "lock_wait", "task_id",
         "log_level", ""]  # fmt: skip
BELOW = ["", "__lease_ttl_secs", "__bugfix__timeout_secs", "__port", "__x", "__"]
VALUES = ["sqlite:///a.db", "", "7", '{"lease_ttl_secs": 5}', "[]", "not json"]


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    """Variables of the prefix in any case, naming fields, keys below them and others, with
    values of every kind; and a variable of another prefix."""
    env = {}
    for _ in range(draw(st.integers(0, 4))):
        prefix = draw(st.sampled_from(["AGENTQUEUE_", "agentqueue_", "AgentQueue_", "AGENTQ_"]))
        head = draw(st.sampled_from(HEADS))
        name = prefix + head + draw(st.sampled_from(BELOW))
        if draw(st.booleans()):
            name = name.upper()
        env[name] = draw(st.sampled_from(VALUES))
    return env


@settings(max_examples=600, deadline=None)
@given(environments())
def test_what_the_names_tell_is_what_the_configuration_reads(env: dict[str, str]) -> None:
    """Where the names say the defaults apply, the configuration reads nothing from them but
    the database's text, that same text; and the settings built then are what loading gives."""
    unconfigured, db = default_db(env)
    try:
        read = config.environment(env)
    except ConfigError:
        assert not unconfigured  # a variable the configuration refuses is never passed over
        return
    if unconfigured:
        assert read.keys() <= {TEXT_FIELD}
        assert read.get(TEXT_FIELD) == db
        with patch.dict(os.environ, env):
            loaded = config.load_settings()
        built = config.unconfigured_settings(db)
        assert built == loaded and built.model_fields_set == loaded.model_fields_set


def test_variables_that_set_nothing_leave_a_process_unconfigured() -> None:
    env = {
        "AGENTQUEUE_CONFIG": "",
        "AGENTQUEUE_ACTOR": "someone",
        "AGENTQUEUE_API": "http://127.0.0.1:1",
        "AGENTQUEUE_TASK_ID": "x",
        "AGENTQUEUE_LOG_LEVEL": "debug",
        "agentqueue_db": "sqlite:///x.db",
        "PATH": "/bin",
    }
    assert default_db(env) == (True, "sqlite:///x.db")
    assert default_db({}) == (True, None)


@pytest.mark.parametrize(
    "name",
    ["AGENTQUEUE_QUEUE__LEASE_TTL_SECS", "agentqueue_Worker__concurrency", "AGENTQUEUE_AGENTS",
     "AGENTQUEUE_API__PORT", "AGENTQUEUE_DB__X"],
)  # fmt: skip
def test_a_variable_that_names_a_setting_sends_it_to_validation(name: str) -> None:
    assert default_db({name: "7"}) == (False, None)
    assert default_db({"AGENTQUEUE_DB": "a", "agentqueue_db": "b"}) == (False, None)


def test_an_unconfigured_queue_holds_what_loading_gives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    monkeypatch.setenv("AGENTQUEUE_DB", url)
    monkeypatch.setenv("AGENTQUEUE_ACTOR", "someone")
    install_keys(Keyring(AuditKey(b"k" * 32)))  # another queue's, earlier in this process

    async def main() -> None:
        async with AsyncQueue() as queue:
            assert queue.url == url
            assert not queue._rt.settings_built
            assert installed_keys() == Keyring()
            await queue.list()
            assert not queue._rt.settings_built  # a read needs none of them
            assert queue.settings == config.load_settings()
            assert queue.settings.db == url
            assert queue._rt.settings_built

    asyncio.run(main())


def test_a_bad_setting_in_the_environment_fails_the_queue_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTQUEUE_QUEUE__LEASE_TTL_SECS", "soon")
    with pytest.raises(ConfigError) as exc:
        AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}")
    assert exc.value.problems[0].field == "queue.lease_ttl_secs"


def test_a_configured_queue_installs_its_audit_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With a key in the environment, the settings are loaded (validated) when the queue is
    built, and the key is installed before the store opens."""
    monkeypatch.setenv("AQ_TEST_AUDIT_KEY", "k" * 32)
    monkeypatch.setenv("AGENTQUEUE_AUDIT__KEY_ENV", "AQ_TEST_AUDIT_KEY")
    try:
        queue = AsyncQueue(f"sqlite:///{tmp_path / 'q.db'}")
        assert queue._rt.settings_built
        assert installed_keys().current is not None
        assert installed_keys() == queue.settings.audit.keyring()
    finally:
        install_keys(Keyring())
