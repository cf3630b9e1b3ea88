"""The audit log's commands (R24): ``audit anchor``, ``verify`` naming what someone with the
database changed, the warning without a key, and a bad ``[audit]`` section refused by name."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from agentqueue.cli import main
from agentqueue.domain.audit import Keyring, install_keys

KEY = "a-key-kept-outside-the-database-0003"


@pytest.fixture(autouse=True)
def _keys_and_triggers_restored(db_url: str) -> Iterator[None]:
    yield
    install_keys(Keyring())
    if not db_url.startswith("sqlite"):
        with psycopg.connect(db_url, autocommit=True) as conn:
            # A test whose configuration is refused before migrating leaves no table (the
            # first PostgreSQL test of a pytest worker starts from an empty database).
            found = conn.execute("SELECT to_regclass('aq_events') IS NOT NULL").fetchone()
            if found and found[0]:
                conn.execute("ALTER TABLE aq_events ENABLE TRIGGER ALL")


def cli(db: str, config: Path | None, *args: str, key: str | None = KEY) -> Result:
    env = {"AQ_TEST_KEY": key} if key else {}
    conf = ["--config", str(config)] if config else []
    return CliRunner().invoke(main, ["--db", db, *conf, *args], env=env, catch_exceptions=False)


def keyed_config(tmp_path: Path) -> Path:
    config = tmp_path / "agentqueue.toml"
    anchors = tmp_path / "anchors.jsonl"
    config.write_text(f'[audit]\nkey_env = "AQ_TEST_KEY"\nanchor_file = "{anchors}"\n')
    return config


def test_anchor_then_verify_then_a_disabled_trigger_exits_1_naming_it(
    db_url: str, tmp_path: Path
) -> None:
    config = keyed_config(tmp_path)
    made = cli(db_url, config, "submit", "--title", "audited", "--type", "docs", "--json")
    assert made.exit_code == 0, made.output
    anchored = cli(db_url, config, "audit", "anchor")
    assert (
        anchored.exit_code == 0 and "anchor 1: 2 events" in anchored.stdout
    )  # submitted and admitted
    line = json.loads((tmp_path / "anchors.jsonl").read_text().splitlines()[-1])
    assert line["count"] == 2 and line["mac"].count(":") == 1
    assert cli(db_url, config, "audit", "anchor").stdout.strip() == "nothing new to anchor"
    good = cli(db_url, config, "verify")
    assert good.exit_code == 0 and "ok: 1 tasks, 2 events" in good.stdout
    assert "warning" not in good.stderr
    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute("DROP TRIGGER aq_events_no_update")
        name = "aq_events_no_update"
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE aq_events DISABLE TRIGGER aq_events_no_truncate")
        name = "aq_events_no_truncate"
    bad = cli(db_url, config, "verify")
    assert bad.exit_code == 1
    assert f"BROKEN: append-only trigger {name} is missing or disabled" in bad.stderr


def test_verify_without_a_key_warns(db_url: str) -> None:
    result = cli(db_url, None, "verify", key=None)
    assert result.exit_code == 0
    assert "warning: no audit key" in result.stderr


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ('key_env = "AQ_NOT_SET_ANYWHERE"', "audit.key_env"),
        ('key_file = "/nonexistent/audit.key"', "audit.key_file"),
        ('key_env = "AQ_TEST_KEY"\nkey_file = "/x"', "audit"),
        ('old_keys = ["AQ_TEST_KEY"]', "audit.old_keys"),
        ('key_env = "AQ_SHORT_KEY"', "audit.key_env"),
    ],
)
def test_a_bad_audit_section_exits_2_naming_the_setting_never_the_key(
    db_url: str, tmp_path: Path, section: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AQ_SHORT_KEY", "short-secret")
    config = tmp_path / "agentqueue.toml"
    config.write_text(f"[audit]\n{section}\n")
    result = cli(db_url, config, "stats")
    assert result.exit_code == 2, result.output
    assert named in result.stderr
    assert "Traceback" not in result.output
    assert KEY not in result.output and "short-secret" not in result.output
