"""A bad log format or level is refused before anything starts, naming the field (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agentqueue.cli import main


@pytest.mark.parametrize("command", ["worker", "serve", "scheduler", "api"])
def test_a_bad_format_in_the_config_is_refused_naming_it(tmp_path: Path, command: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[logging]\nformat = "xml"\n')
    done = CliRunner().invoke(main, ["--config", str(config), command], env={})
    assert done.exit_code == 2, done.output
    assert "logging.format: must be text or json, not 'xml'" in done.output


def test_a_bad_level_in_the_config_or_environment_is_refused_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[logging]\nlevel = "LOUD"\n')
    done = CliRunner().invoke(main, ["--config", str(config), "worker"])
    assert done.exit_code == 2 and "logging.level: must be one of" in done.output, done.output
    done = CliRunner().invoke(main, ["worker"], env={"AGENTQUEUE_LOG_LEVEL": "LOUD"})
    assert done.exit_code == 2 and "AGENTQUEUE_LOG_LEVEL: must be one of" in done.output


def test_a_bad_log_format_option_is_refused_naming_it() -> None:
    done = CliRunner().invoke(main, ["--log-format", "xml", "worker"])
    assert done.exit_code == 2
    assert "Invalid value for '--log-format'" in done.output
