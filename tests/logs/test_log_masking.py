"""Secrets never appear in a log line: not in the message, not in extra fields, not in an
exception's text, in either format."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from agentqueue.logsetup import MASK, configure, mask

ENV_SECRET = "s3cr3t-from-the-environment"
URL_PASSWORD = "pw-of-the-database-91"
CONFIG_SECRET = "config-webhook-secret-77"
API_TOKEN = "aq_abcdefghijkl_Zm9vYmFyYmF6cXV4LXRva2VuLXZhbHVl"


@pytest.fixture
def capture() -> Iterator[io.StringIO]:
    """The root logger as ``configure`` leaves it, writing to a buffer; restored after."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    yield io.StringIO()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved_handlers:
        root.addHandler(handler)
    root.setLevel(saved_level)


def _log_everything(logger: logging.Logger) -> None:
    logger.info("connecting to postgresql://agent:%s@db:5432/jobs", URL_PASSWORD)
    logger.info("env value %s and token %s", ENV_SECRET, API_TOKEN)
    logger.info(
        "extra fields",
        extra={
            "api_token": "plain-token-value-42",
            "note": f"webhook uses {CONFIG_SECRET}",
            "headers": {"Authorization": "Bearer abc.def.ghi", "X-Other": ENV_SECRET},
            "sent": "Authorization: Bearer abc.def.ghi",
        },
    )
    try:
        raise RuntimeError(f"refused: password={ENV_SECRET}; url=https://u:{URL_PASSWORD}@h/")
    except RuntimeError:
        logger.exception("the call failed")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_are_masked_in_message_extra_fields_and_exceptions(
    fmt: str, capture: io.StringIO
) -> None:
    stream = capture
    configure(
        fmt,
        "INFO",
        stream=stream,
        db_url=f"postgresql://agent:{URL_PASSWORD}@db:5432/jobs",
        config_data={"callbacks": {"secret": CONFIG_SECRET}, "db": "sqlite:///q.db"},
        environ={"MY_SERVICE_TOKEN": ENV_SECRET, "HOME": "/root"},
    )
    _log_everything(logging.getLogger("app"))
    out = stream.getvalue()
    for secret in (ENV_SECRET, URL_PASSWORD, CONFIG_SECRET, API_TOKEN, "plain-token-value-42",
                   "abc.def.ghi"):  # fmt: skip
        assert secret not in out, f"{secret} leaked in: {out}"
    assert out.count(MASK) >= 7
    assert "the call failed" in out and "RuntimeError" in out  # the rest is kept
    if fmt == "json":
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert [line["message"] for line in lines][:3] == [
            f"connecting to postgresql://agent:{MASK}@db:5432/jobs",
            f"env value {MASK} and token {MASK}",
            "extra fields",
        ]
        assert lines[2]["api_token"] == MASK
        assert lines[2]["headers"]["Authorization"] == MASK
        assert "RuntimeError: refused" in lines[3]["exception"]


def test_mask_keeps_ordinary_text() -> None:
    text = "task 0193 bugfix attempt 2: executing -> retrying (12.5 ms)"
    assert mask(text) == text
    assert mask("ran the basic configuration checks") == "ran the basic configuration checks"
    assert mask("Bearer eyJhbGciOiJIUzI1NiJ9.e30.x") == f"Bearer {MASK}"
    assert mask("Authorization: Basic dXNlcjpwYXNz") == f"Authorization: Basic {MASK}"
    assert mask("AWS_SECRET_ACCESS_KEY=abcd1234 next") == f"AWS_SECRET_ACCESS_KEY={MASK} next"
    assert mask('{"password": "hunter22"}') == f'{{"password": "{MASK}"}}'
