"""Bounds on what any input may hold, in one place, used by every path that reads input: the
CLI, the configuration file, the HTTP API's bodies, webhooks and an agent's output.

Input is bounded before it is parsed (at most ``limit + 1`` bytes are read, then it is refused)
and its value after: JSON nested at most :data:`MAX_JSON_DEPTH` deep, whole numbers of at most
:data:`MAX_INT_DIGITS` digits, finite numbers only, text in UTF-8, no NUL character in a string
or a key (see :mod:`.values`), and times within :data:`LATEST_TIME`. Each refusal is a message
naming where; the callers turn it into their own error naming the field.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import IO, Any

from .errors import InvalidInput
from .values import NUL, NUL_PROBLEM

MAX_JSON_DEPTH = 512
"""Arrays and objects inside each other, at most."""

MAX_INT_DIGITS = 100
"""Digits of a whole number, at most (Python refuses to print one of more than 4,300)."""

MAX_NUMBER_CHARS = 400
"""Characters of a number with a fraction or exponent, at most."""

MAX_INPUT_BYTES = 64 * 1024 * 1024
"""The most the CLI reads from a JSON argument's file or a task file (64 MiB); a payload is
then held to ``[queue] max_payload_bytes``."""

MAX_CONFIG_BYTES = 1024 * 1024
"""The most a configuration file may hold (1 MiB)."""

LATEST_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""A time given as input (``run_after``) must be before this: later ones cannot be shifted
by a time zone or added to without leaving the calendar Python and the databases keep."""

_INT_BOUND = 10**MAX_INT_DIGITS


class JSONLimitError(ValueError):
    """JSON that is valid but over a bound (or not UTF-8); the message says which."""


def read_bounded(stream: IO[bytes], limit: int, field: str) -> bytes:
    """At most ``limit`` bytes from ``stream``: it reads ``limit + 1`` at most and refuses
    more, so an endless input (``/dev/zero``) is refused at once."""
    data = b""
    while len(data) <= limit:
        chunk = stream.read(limit + 1 - len(data))
        if not chunk:
            return data
        data += chunk
    raise InvalidInput(f"is larger than {_size(limit)}", field)


def utf8_text(data: bytes, field: str) -> str:
    """``data`` decoded as UTF-8, or InvalidInput naming ``field`` and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", field
        ) from None


def parse_json(text: str | bytes, *, nul: bool = True) -> Any:
    """JSON text parsed within the bounds: ValueError (JSONLimitError when over a bound) for
    text that is not JSON, holds NaN or Infinity, or is over a bound. ``nul=False`` leaves
    NUL characters to a later check that names the field."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONLimitError(f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_no_constant,
        )
    except RecursionError:
        raise JSONLimitError(_DEEP) from None
    problem = json_problem(value, nul=nul)
    if problem is not None:
        where, message = problem
        raise JSONLimitError(f"{where}: {message}" if where else message)
    return value


def loads_json(text: str | bytes, field: str) -> Any:
    """:func:`parse_json`, with every problem as InvalidInput naming ``field``."""
    try:
        return parse_json(text)
    except JSONLimitError as exc:
        raise InvalidInput(str(exc), field) from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON ({exc.msg} at line {exc.lineno})", field) from None
    except ValueError as exc:
        raise InvalidInput(f"not valid JSON ({exc})", field) from None


def json_problem(value: Any, *, nul: bool = True) -> tuple[str, str] | None:
    """The first place (``a.b[2]``, "" for the value itself) where a JSON-like value is over a
    bound or holds a NUL character, and what is wrong there; None when it is within them.
    Iterative, so a value nested however deep is answered without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if nul and NUL in item:
                return path, NUL_PROBLEM
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -_INT_BOUND < item < _INT_BOUND:
                return path, f"a whole number of more than {MAX_INT_DIGITS} digits"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, "not a finite number"
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                return "", _DEEP  # the value as a whole (a path this long says nothing)
            if isinstance(item, dict):
                children = []
                for key, child in item.items():
                    shown = str(key).replace(NUL, "\\u0000")
                    where = f"{path}.{shown}" if path else shown
                    if nul and isinstance(key, str) and NUL in key:
                        return where, NUL_PROBLEM
                    children.append((child, depth + 1, where))
            else:
                children = [(c, depth + 1, f"{path}[{i}]") for i, c in enumerate(item)]
            stack.extend(reversed(children))
    return None


def joined(field: str, where: str) -> str:
    """A field and a place inside its value: ``result`` and ``a[1]`` make ``result.a[1]``."""
    if not where:
        return field
    return f"{field}{where}" if where.startswith("[") else f"{field}.{where}"


def time_problem(when: datetime) -> str | None:
    """Why ``when`` cannot be taken as input, or None."""
    aware = when if when.tzinfo else when.replace(tzinfo=UTC)
    try:
        late = aware >= LATEST_TIME
    except OverflowError:
        late = True
    if late:
        return "must be before the year 9999"
    return None


_DEEP = f"is nested more than {MAX_JSON_DEPTH} levels deep"


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JSONLimitError(f"a whole number of {digits} digits, over {MAX_INT_DIGITS}")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONLimitError(f"a number of {len(text)} characters, over {MAX_NUMBER_CHARS}")
    value = float(text)
    if not math.isfinite(value):
        raise JSONLimitError(f"the number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _size(limit: int) -> str:
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"
