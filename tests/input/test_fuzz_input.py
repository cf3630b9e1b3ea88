"""Fuzzing the two front doors a person types into: ``agentqueue submit`` (in-process through
click's runner, against a real SQLite file and a real PostgreSQL database) and the
configuration loader (TOML text). Whatever comes in: no traceback; a refusal is exit 2 (a
ConfigError for the loader) naming a field, and writes nothing; an acceptance writes one task.
Bounded for CI: a few dozen examples each, no deadline."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentqueue.cli import main
from agentqueue.config import Settings, parse_config_text, settings_from
from agentqueue.domain.errors import ConfigError

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text with the characters that broke things: NUL, lone surrogates are not valid argv, so
# they are left out; control characters, digits and brackets are favoured.
_chars = st.characters(codec="utf-8", exclude_categories=("Cs",))
_text = st.one_of(
    st.text(_chars, max_size=40),
    st.text(st.sampled_from('a\x00[]{}"\\:,-+0123456789.eE dhms'), max_size=40),
)
_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**120), max_value=10**120),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_chars, max_size=20),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(_chars, max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_payload = st.one_of(
    _json.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.integers(min_value=1, max_value=6000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["NaN", "-Infinity", "1e999", '{"a": "\\u0000"}', '{"\\u0000": 1}']),
    _text,
)
_relative = st.builds(
    lambda n, unit: f"+{n}{unit}",
    st.integers(min_value=0, max_value=10**30),
    st.sampled_from("smhd"),
)
_when = st.one_of(
    _relative,
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "+1e5d"]),
    _text,
)
_name = st.from_regex(r"\A[a-z][a-z0-9_.-]{0,20}\Z")


def _mostly(good: Any, bad: Any) -> Any:
    """Good values three times in four, so that checks after the first are reached too."""
    return st.one_of(good, good, good, bad)


_flags: dict[str, Any] = {
    "--title": _mostly(st.text(_chars, min_size=1, max_size=40), _text),
    "--type": _mostly(_name, _text),
    "--priority": _mostly(st.sampled_from(["0", "P1", "9", "P2"]), _text),
    "--payload": _mostly(_json.map(lambda v: json.dumps({"v": v}, ensure_ascii=False)), _payload),
    "--tenant": _mostly(_name, _text),
    "--idempotency-key": _mostly(_name, _text),
    "--label": _mostly(_name, _text),
    "--timeout": _mostly(st.integers(1, 3600).map(str), st.integers().map(str) | _text),
    "--max-retries": _mostly(st.integers(0, 3).map(str), st.integers().map(str) | _text),
    "--run-after": _when,
    "--requested-by": _mostly(_name, _text),
    "--source-id": _mostly(_name, _text),
}
_argv = st.dictionaries(
    st.sampled_from(sorted(_flags)), st.just(None), min_size=3, max_size=8
).flatmap(lambda chosen: st.fixed_dictionaries({flag: _flags[flag] for flag in chosen}))
_FIELD = re.compile(r"^error: ([a-z_]+)(\[\d+\])?[.:]")


def _count(db: str) -> int:
    result = CliRunner().invoke(main, ["--db", db, "stats", "--json"])
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)["total"])


@FUZZ
@given(flags=_argv)
def test_submit_never_crashes_and_a_refusal_names_a_field_and_writes_nothing(
    db_url: str, flags: dict[str, str]
) -> None:
    """Any flags (a title and a type always given, perhaps bad ones among them): exit 0 with
    the task written, or exit 2 with ``error: <field>: ...`` and nothing written."""
    argv = ["--title", "fuzz", "--type", "docs"]
    for flag, value in flags.items():
        argv += [flag, value]
    before = _count(db_url)
    result = CliRunner().invoke(main, ["--db", db_url, "--actor", "fuzz", "submit", *argv])
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 2), (result.exit_code, result.output[-1500:], argv)
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    if result.exit_code == 2:
        assert _FIELD.match(result.output), result.output[:300]
        assert _count(db_url) == before
    else:
        assert _count(db_url) in (before, before + 1)  # a matched idempotency key adds none


# --- the configuration loader ---------------------------------------------------------------------

_key = st.one_of(
    st.sampled_from(
        ["queue", "worker", "agents", "guardrails", "api", "max_payload_bytes", "name",
         "pattern", "command", "timeout_secs", "lease_secs", "db", "a b", "x\x00"]
    ),
    st.text(_chars, min_size=1, max_size=8),
)  # fmt: skip
_toml_value = st.recursive(
    st.one_of(
        st.integers(min_value=-(10**130), max_value=10**130).map(str),
        st.integers(min_value=1, max_value=5000).map(lambda n: "1" * n),
        st.floats().map(lambda f: repr(f).replace("inf", "inf").replace("nan", "nan")),
        st.text(_chars, max_size=20).map(lambda s: json.dumps(s)),
        st.sampled_from(['"(a+)+$"', '"(a|aa)+$"', '"["', "true", "1979-05-27T07:32:00Z"]),
    ),
    lambda inner: st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    max_leaves=8,
)
_toml_line = st.builds(lambda k, v: f"{json.dumps(k)} = {v}", _key, _toml_value)
_toml = st.one_of(
    st.builds(
        lambda table, lines: (f"[{table}]\n" if table else "") + "\n".join(lines),
        st.sampled_from(["", "queue", "worker", "api", "[guardrails]", "agents.x"]),
        st.lists(_toml_line, max_size=5),
    ),
    st.text(_chars, max_size=200),
    st.integers(min_value=1, max_value=3000).map(lambda n: "a = " + "[" * n + "]" * n),
)


@FUZZ
@given(text=_toml)
def test_the_config_loader_gives_settings_or_a_config_error(text: str) -> None:
    """TOML text, good or bad: Settings, or a ConfigError naming a setting; never another
    exception."""
    try:
        result = settings_from(parse_config_text(text.encode("utf-8", "surrogatepass")))
    except ConfigError as exc:
        assert exc.problems and all(p.field for p in exc.problems), exc
    else:
        assert isinstance(result, Settings)


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (b'a = "x\\u0000"', "a", "NUL"),
        (b"[queue]\nmax_payload_bytes = " + b"1" * 5000, "config", "4300 digits"),
        (b"a = " + b"[" * 5000 + b"]" * 5000, "config", "nested"),
        (b'a = "\xff"', "config", "not UTF-8"),
    ],
)
def test_the_config_loader_refuses_what_it_cannot_hold(raw: bytes, field: str, words: str) -> None:
    """A NUL in a string, a number Python will not read, nesting past the parser's recursion
    and bytes that are not UTF-8: each a ConfigError naming where, none a traceback."""
    with pytest.raises(ConfigError) as caught:
        parse_config_text(raw)
    assert caught.value.problems[0].field == field
    assert words in caught.value.problems[0].message
