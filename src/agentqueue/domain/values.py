"""What a stored value may hold, the same on every backend.

PostgreSQL cannot store the NUL character (U+0000) in text or JSON, and SQLite can; so that a
task means the same on both, no stored string may hold one. Input that does is refused naming
the field; free text from an agent (an error message, captured output) has it replaced.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import InvalidInput

NUL = "\x00"
NUL_PROBLEM = "contains the NUL character (\\u0000), which cannot be stored"


def nul_path(value: Any, path: str = "") -> str | None:
    """The path (``payload.a[2]``) of the first string in a JSON-like value, keys included,
    that holds a NUL character, or None if there is none."""
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and NUL in key:
                return where
            found = nul_path(item, where)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = nul_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def storable_text(value: str, field: str) -> str:
    """``value`` if it holds no NUL character; else InvalidInput naming ``field``."""
    if NUL in value:
        raise InvalidInput(NUL_PROBLEM, field)
    return value


def without_nul(text: str) -> str:
    """Free text with each NUL character replaced by U+FFFD (the replacement character)."""
    return text.replace(NUL, "\ufffd") if NUL in text else text


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, strings, numbers, booleans, None), as
    ``copy.deepcopy`` makes it for these, at a fraction of its cost: strings and numbers are
    immutable and shared, and no memo of seen objects is kept (JSON has no cycles). Anything
    else goes to ``copy.deepcopy``. Each attempt's handler gets its own copy of the payload."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)
