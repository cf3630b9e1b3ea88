"""Log lines of the long-running commands: text or JSON, one line per record, secrets masked.

``configure(fmt, level)`` sets up the root logger once for ``worker``, ``serve``,
``scheduler`` and ``api``: a handler on stderr whose formatter masks secrets in everything it
writes (the message, extra fields and an exception's text). JSON lines hold ``time`` (UTC, ISO
8601), ``level``, ``logger``, ``message`` and every extra field the call gave (``task_id``,
``task_type``, ``agent``, ``attempt``, ``from``, ``to``, ``duration_ms``, ``error``,
``traceback``, ...).

What is masked: the password of any URL (``scheme://user:PASSWORD@host``), the value after a key
that names a secret (``token=...``, ``"password": "..."``, ``X_SECRET_KEY=...``, ``Bearer ...``),
agentqueue API tokens (``aq_<prefix>_<key>``), and every value known to be secret: environment
variables whose names match ``*_SECRET*``, ``*TOKEN*`` or ``*PASSWORD*``, the database URL's
password, and config values under such keys (see :func:`add_secret`).

Only the standard library: importing this module costs nothing worth measuring.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from .domain.errors import ConfigError

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MASK = "***"

SECRET_NAME = re.compile(r"secret|token|password|passwd|api_?key|authorization", re.IGNORECASE)
"""A key or variable name whose value is a secret (matched anywhere in the name)."""

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][\w+.-]*://[^\s:/@]*:)([^\s@/]+)(@)")
# An Authorization header's credential, whatever its scheme; and "Bearer <token>" anywhere
# (a token of 16 characters or more, so a sentence with the word in it is left alone).
_AUTH_HEADER = re.compile(
    r"""(?i)(authorization["']?\s*[:=]\s*["']?)((?:bearer|basic|token)\s+)?[^\s"',;&}]+"""
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]{16,}")
_API_TOKEN = re.compile(r"\baq_[a-z0-9]{12}_[\w-]+")
# The value after a key naming a secret: token=..., "password": "...", X_SECRET_KEY=... (the
# match starts at the keyword, so the scan stays linear).
_KEY_VALUE = re.compile(
    r"""(?i)((?:secret|token|password|passwd|api_?key)[\w.-]*["']?\s*[:=]\s*["']?)"""
    r"""([^\s"',;&}]+)"""
)
_KEYWORDS = ("secret", "token", "passw", "apikey", "api_key")

_secrets: list[str] = []
MIN_SECRET_CHARS = 4
"""Shorter values are not masked literally (masking every ``1`` would hide everything)."""


def add_secret(value: str | None) -> None:
    """Mask every occurrence of ``value`` in log lines from now on."""
    if value is None or len(value) < MIN_SECRET_CHARS or value in _secrets:
        return
    _secrets.append(value)
    _secrets.sort(key=len, reverse=True)  # the longest first: no partial leaks


def add_secrets_from(environ: Mapping[str, str]) -> None:
    """Mask the values of variables whose names match ``*_SECRET*``, ``*TOKEN*``,
    ``*PASSWORD*`` (and the like)."""
    for name, value in environ.items():
        if SECRET_NAME.search(name):
            add_secret(value)


def add_url_password(url: str | None) -> None:
    """Mask the password of a database URL."""
    if not url or "://" not in url:
        return
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        add_secret(password)
        add_secret(unquote(password))


def add_config_secrets(data: Any, secret: bool = False) -> None:
    """Mask the values under keys that name a secret in a config document (nested dicts and
    lists), and the password of any URL in it."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            add_config_secrets(value, secret or bool(SECRET_NAME.search(str(key))))
    elif isinstance(data, list | tuple):
        for value in data:
            add_config_secrets(value, secret)
    elif isinstance(data, str):
        if secret:
            add_secret(data)
        add_url_password(data)


def mask(text: str) -> str:
    """``text`` with every secret it holds replaced by ``***``. Each rule runs only when a
    cheap substring test says it may apply: a plain line (a task transition) costs a few
    substring searches, no regular expression."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\g<1>{MASK}\g<3>", text)
    if "aq_" in text:
        text = _API_TOKEN.sub(MASK, text)
    lower = text.lower()
    if "authorization" in lower:
        text = _AUTH_HEADER.sub(rf"\g<1>\g<2>{MASK}", text)
    if "bearer" in lower:
        text = _BEARER.sub(rf"\g<1>{MASK}", text)
    if any(word in lower for word in _KEYWORDS):
        text = _KEY_VALUE.sub(rf"\g<1>{MASK}", text)
    return text


_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colours
}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call added with ``extra=``."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


def utc_time(created: float) -> str:
    """``2026-11-30T19:20:00.123Z``."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return mask(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {
            str(k): MASK if SECRET_NAME.search(str(k)) else _masked(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return mask(str(value))


TRANSITIONS = "transitions"
"""A record with this extra field (a list of field dicts) stands for a batch of task
transitions: the formatters write one line for each."""


def transition_text(item: Mapping[str, Any]) -> str:
    """``task ID TYPE attempt N: FROM -> TO (MS ms)``, the agent and error when there are."""
    agent = f" agent {item['agent']}" if item.get("agent") else ""
    error = f": {item['error']}" if item.get("error") else ""
    return (
        f"task {item['task_id']} {item['task_type']}{agent} attempt {item['attempt']}: "
        f"{item['from']} -> {item['to']} ({item['duration_ms']} ms){error}"
    )


def _transition_line(head: dict[str, Any], item: Mapping[str, Any]) -> str:
    line = {**head, "message": mask(transition_text(item)), **item}
    for key in ("task_type", "agent", "error", "traceback"):
        value = line.get(key)
        if isinstance(value, str):
            line[key] = mask(value)
    return json.dumps(line, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, secrets masked."""

    def format(self, record: logging.LogRecord) -> str:
        batch = record.__dict__.get(TRANSITIONS)
        if batch is not None:
            head = {"time": utc_time(record.created), "level": record.levelname,
                    "logger": record.name}  # fmt: skip
            return "\n".join(_transition_line(head, item) for item in batch)
        line: dict[str, Any] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": mask(record.getMessage()),
        }
        for key, value in extra_fields(record).items():
            line[key] = MASK if SECRET_NAME.search(key) else _masked(value)
        if record.exc_info:
            line["exception"] = mask(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = mask(self.formatStack(record.stack_info))
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL logger: message``; a traceback field and an exception on the lines after;
    secrets masked."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_time(record.created)

    def format(self, record: logging.LogRecord) -> str:
        batch = record.__dict__.get(TRANSITIONS)
        if batch is not None:
            head = f"{utc_time(record.created)} {record.levelname} {record.name}: "
            lines = []
            for item in batch:
                lines.append(head + transition_text(item))
                if item.get("traceback"):
                    lines.append(item["traceback"].rstrip())
            return mask("\n".join(lines))
        text = super().format(record)
        trace = record.__dict__.get("traceback")
        if isinstance(trace, str) and trace:
            text = f"{text}\n{trace.rstrip()}"
        return mask(text)


def make_formatter(fmt: str = "text") -> logging.Formatter:
    """The formatter of ``fmt`` (text or json). Also the factory ``logging.config`` calls in
    the processes of ``api --workers N``: it learns the secrets of their environment (and
    their database URL's password) too."""
    add_secrets_from(os.environ)
    add_url_password(os.environ.get("AGENTQUEUE_DB"))
    return JsonFormatter() if fmt == "json" else TextFormatter()


def check_format(value: str, field: str = "logging.format") -> str:
    """``value`` as a log format; ConfigError naming ``field`` if it is not one."""
    fmt = value.strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(f"must be text or json, not {value!r}", field)
    return fmt


def check_level(value: str, field: str = "logging.level") -> str:
    """``value`` as a level name; ConfigError naming ``field`` if it is not one."""
    level = value.strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LEVELS:
        raise ConfigError(f"must be one of {', '.join(LEVELS)}, not {value!r}", field)
    return level


def configure(
    fmt: str = "text",
    level: str = "INFO",
    *,
    stream: Any = None,
    db_url: str | None = None,
    config_data: Any = None,
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) in ``fmt``, at ``level`` and above, with
    secrets masked: the known ones from ``environ`` (os.environ), the database URL and the
    config document. Replaces the handlers the root logger had; returns the new handler."""
    add_secrets_from(os.environ if environ is None else environ)
    add_url_password(db_url)
    add_config_secrets(config_data)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(make_formatter(check_format(fmt, "log-format")))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(check_level(level))
    # No line prints the caller's file and line, thread or process: not looking them up for
    # every record makes a record about a third cheaper (the logging docs' own advice).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # The pool warns of every failed reconnect while the database is away; the loops that wait
    # on it say so once themselves.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    return handler
