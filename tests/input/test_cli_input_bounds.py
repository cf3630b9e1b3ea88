"""The seven inputs that ended `agentqueue submit` in a traceback, on both backends, plus NUL
characters and a catastrophic guardrail pattern: each is now exit 2 naming the field, with
nothing written (or, for a pattern that slips past the check at load, a held task)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agentqueue.cli import main

DEEP = "[" * 10_000 + "]" * 10_000
HUGE = "1" * 5_000


def cli(db: str, *args: str, config: Path | None = None, input: bytes | None = None) -> Result:
    prefix = ["--db", db, "--actor", "tester"]
    if config is not None:
        prefix += ["--config", str(config)]
    return CliRunner().invoke(main, [*prefix, *args], input=input)


def count(db: str) -> int:
    result = cli(db, "stats", "--json")
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)["total"])


def refused(db: str, field: str, *args: str, input: bytes | None = None) -> str:
    """Submit with ``args``; assert exit 2, ``error: <field>: ...``, no traceback and no new
    task; return the message."""
    before = count(db)
    result = cli(db, "submit", "--title", "t", "--type", "bugfix", *args, input=input)
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.output.startswith(f"error: {field}: "), result.output[:300]
    assert count(db) == before
    return result.output


def test_a_payload_nested_ten_thousand_deep(db_url: str, tmp_path: Path) -> None:
    """Was a RecursionError."""
    (tmp_path / "deep.json").write_text(f'{{"a": {DEEP}}}')
    assert "nested more than 512 levels" in refused(
        db_url, "payload", "--payload", "@" + str(tmp_path / "deep.json")
    )


def test_a_five_thousand_digit_whole_number(db_url: str) -> None:
    """Was Python's int-to-str ValueError; the bound is 100 digits."""
    assert "5000 digits" in refused(db_url, "payload", "--payload", HUGE)
    assert "101 digits" in refused(db_url, "payload", "--payload", f'{{"n": -{"9" * 101}}}')
    assert "out of range" in refused(db_url, "payload", "--payload", '{"n": 1e999}')


def test_a_binary_payload_file(db_url: str, tmp_path: Path) -> None:
    """Was a UnicodeDecodeError: the first bad byte and its offset are named."""
    (tmp_path / "bin.json").write_bytes(b'{"a": "\xff\xfe"}')
    message = refused(db_url, "payload", "--payload", "@" + str(tmp_path / "bin.json"))
    assert "not UTF-8 text (byte 0xff at offset 7)" in message
    assert "not UTF-8" in refused(db_url, "payload", "--payload", "@-", input=b'"\xc3"')


@pytest.mark.parametrize(
    "when", ["+99999999d", "+1e400s".replace("e400", "9" * 400), "9999-12-31T23:00:00-05:00"]
)
def test_a_run_after_past_the_calendar(db_url: str, when: str) -> None:
    """+99999999d was an OverflowError; a time just inside the calendar but behind UTC would
    overflow when shifted; both are refused naming run_after."""
    refused(db_url, "run_after", "--run-after", when)


def test_an_endless_payload_file_is_refused_after_the_limit(db_url: str) -> None:
    """@/dev/zero was read whole (for ever): at most 64 MiB and one byte is read."""
    assert "larger than 64 MiB" in refused(db_url, "payload", "--payload", "@/dev/zero")


def test_a_task_file_over_the_limit_or_binary_is_refused(db_url: str, tmp_path: Path) -> None:
    """--file is held to the same bounds, naming file."""
    (tmp_path / "bin.jsonl").write_bytes(b'{"title": "\xff", "task_type": "bugfix"}\n')
    before = count(db_url)
    for path in (str(tmp_path / "bin.jsonl"), "/dev/zero"):
        result = cli(db_url, "submit", "--file", path)
        assert result.exit_code == 2, result.output[-500:]
        assert result.output.startswith("error: file: "), result.output[:200]
    assert count(db_url) == before


@pytest.mark.parametrize(
    ("args", "field", "where"),
    [
        (["--payload", '{"notes": ["ok", "a\\u0000b"]}'], "payload", "notes[1]: "),
        (["--payload", '{"k\\u0000": 1}'], "payload", "k\\u0000: "),
        (["--title", "Fix\x00login"], "title", ""),
        (["--idempotency-key", "k\x00"], "idempotency_key", ""),
        (["--requested-by", "me\x00"], "requested_by", ""),
        (["--type", "bug\x00fix"], "task_type", ""),
        (["--tenant", "acme\x00"], "tenant", ""),
        (["--label", "py\x00"], "labels", ""),
        (["--assignee", "fixer\x00"], "assignee", ""),
        (["--source", "issue", "--source-id", "o/r#1\x00"], "source_id", ""),
    ],
)
def test_a_nul_character_is_refused_with_one_message_on_both_backends(
    db_url: str, args: list[str], field: str, where: str
) -> None:
    """SQLite stored it and PostgreSQL raised its own error: both now refuse it, naming the
    field (and the place in a payload), with the same words."""
    message = refused(db_url, field, *args)
    assert message.startswith(
        f"error: {field}: {where}contains the NUL character (\\u0000), which cannot be stored"
    ), message


def test_a_nul_character_in_a_task_file_is_refused(db_url: str) -> None:
    before = count(db_url)
    result = cli(db_url, "submit", "--file", "-", input=b'{"title": "a\\u0000", "task_type": "x"}')
    assert result.exit_code == 2 and "contains the NUL character" in result.output, result.output
    assert count(db_url) == before


def test_a_pattern_that_repeats_a_repetition_is_refused_at_load(
    db_url: str, tmp_path: Path
) -> None:
    """(a+)+$ held a submit for over a minute on a 31-character title: the configuration that
    holds it is refused, naming the rule's pattern, before anything is read or written."""
    config = tmp_path / "guard.toml"
    config.write_text('[[guardrails]]\nname = "evil"\npattern = "(a+)+$"\n')
    result = cli(db_url, "submit", "--title", "a" * 30 + "!", "--type", "bugfix", config=config)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: guardrails.0.pattern: repeats a repetition"), (
        result.output
    )


def test_a_slow_pattern_holds_the_task_for_approval(db_url: str, tmp_path: Path) -> None:
    """(a|aa)+$ has no nested repetition yet backtracks exponentially: the search stops at its
    time limit and counts as found, so the task is held for approval naming the rule (the
    submit returns instead of hanging)."""
    config = tmp_path / "guard.toml"
    config.write_text('[[guardrails]]\nname = "slow"\npattern = "(a|aa)+$"\n')
    title = "a" * 60 + "!"
    result = cli(db_url, "submit", "--title", title, "--type", "bugfix", "--json", config=config)
    assert result.exit_code == 0, result.output
    task = json.loads(result.stdout)
    assert task["state"] == "blocked"
    assert "guardrail 'slow' requires approval: its pattern took longer" in task["state_reason"]
