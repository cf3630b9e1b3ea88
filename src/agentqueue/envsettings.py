"""Environment overrides of a settings model: the values ``PREFIX`` variables set, as a table
to merge over the configuration file's.

The rules (those pydantic-settings applies with ``env_prefix``, ``env_nested_delimiter="__"``
and ``case_sensitive=False``, written out here so that start-up need not import it):

- Names are matched without regard to case: ``agentqueue_db`` is ``AGENTQUEUE_DB``.
- ``PREFIX`` + a field's name sets that field. Only the model's own fields are read: any other
  ``PREFIX`` variable is left to whoever reads it (``AGENTQUEUE_CONFIG``, ``AGENTQUEUE_ACTOR``).
- A field holding a model, a list or a table (a *complex* field) takes its variable's value as
  JSON; a value that is not JSON is an error naming the variable.
- ``__`` descends a level: ``PREFIX_QUEUE__LEASE_TTL_SECS`` sets ``lease_ttl_secs`` of the
  ``queue`` model, ``PREFIX_TASK_TYPES__BUGFIX__TIMEOUT_SECS`` the ``bugfix`` entry of a table.
  Such variables are merged over the JSON value of the field's own variable, if both are set.
  A leaf that is itself a complex field is read as JSON (an error if it is not); a table's
  entry is read as JSON when it parses (else kept as text, for validation to refuse).
- A name below a field that the model does not know is kept as given, so validation refuses it
  naming the key (``queue.bogus: unknown setting``).
- Other values stay text: validation converts them (``"30"`` to 30.0, ``"true"`` to True).
"""

from __future__ import annotations

import json
import types
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from .domain.errors import ConfigError

NESTING = "__"

_COMPLEX = (BaseModel, Mapping, Sequence, tuple, set, frozenset, deque)


def _subclass(value: Any, classes: Any) -> bool:
    return isinstance(value, type) and issubclass(value, classes)


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def is_complex(annotation: Any) -> bool:
    """Whether a value of this type is given as JSON: a model, a list, a table, a set."""
    if _subclass(annotation, (str, bytes)):
        return False
    return _subclass(annotation, _COMPLEX) or _subclass(get_origin(annotation), _COMPLEX)


def _complexity(annotation: Any) -> tuple[bool, bool]:
    """(read as JSON, JSON required) for a field of this type: a union holding a complex type
    (``list[int] | None``) is read as JSON when it parses, else kept as text."""
    if is_complex(annotation):
        return True, True
    if _is_union(annotation) and any(is_complex(a) for a in get_args(annotation)):
        return True, False
    return False, False


def _next(target: Any, key: str) -> tuple[Any, bool] | None:
    """The type ``key`` leads to below ``target`` (a type), and whether it is a model's field
    (else a table's entry); None when it leads nowhere known."""
    if target is None:
        return None
    if _subclass(get_origin(target), dict) or target is dict:
        args = get_args(target)
        return (args[-1], False) if args else None
    for arg in get_args(target):
        found = _next(arg, key)
        if found is not None:
            return found
    if _subclass(target, BaseModel):
        for name, field in target.model_fields.items():
            if name.lower() == key.lower():
                return field.annotation, True
    return None


def _json(value: str, variable: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise ConfigError(
            "is not valid JSON (the value of a table or a list is given as JSON)",
            variable.upper(),
        ) from None


def _nested(prefix: str, annotation: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """The values of the ``prefix...`` variables (``prefix`` ending in ``__``), as a table."""
    is_table = _subclass(get_origin(annotation), dict) or annotation is dict
    result: dict[str, Any] = {}
    for variable, value in env.items():
        if not variable.startswith(prefix):
            continue
        *keys, last = variable[len(prefix) :].split(NESTING)
        node: Any = result
        target: tuple[Any, bool] | None = (annotation, True)
        for key in keys:
            target = _next(target[0], key) if target is not None else None
            if isinstance(node, dict):
                node = node.setdefault(key, {})
        target = _next(target[0], last) if target is not None else None
        decoded: Any = value
        if value and (target is not None or is_table):
            if target is None:
                read, required = True, False
            elif target[1]:
                read, required = _complexity(target[0])
            else:
                read, required = is_complex(target[0]), False
            if read:
                try:
                    decoded = json.loads(value)
                except ValueError:
                    if required:
                        _json(value, variable)
        if isinstance(node, dict):
            node[last] = decoded
    return result


def environment_values(
    model: type[BaseModel],
    environ: Mapping[str, str],
    prefix: str,
    whole_excluded: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """What the ``prefix`` variables of ``environ`` set in ``model``, by field name. A field of
    ``whole_excluded`` is not read from its own variable (its ``__`` variables still are)."""
    prefix = prefix.lower()
    # Only the prefix's variables: the type checks below are paid for the fields they set.
    env = {
        name.lower(): value for name, value in environ.items() if name.lower().startswith(prefix)
    }
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        variable = prefix + name.lower()
        if variable not in env and not any(v.startswith(variable + NESTING) for v in env):
            continue
        value = None if name in whole_excluded else env.get(variable)
        read, required = _complexity(field.annotation)
        if not read:
            if value is not None:
                values[name] = value
            continue
        nested = _nested(variable + NESTING, field.annotation, env)
        if value is None:
            if nested:
                values[name] = nested
            continue
        decoded: Any = value
        try:
            decoded = json.loads(value)
        except ValueError:
            if required:
                _json(value, variable)
        values[name] = deep_update(decoded, nested) if isinstance(decoded, dict) else decoded
    return values


def by_field_name(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each top-level key matched to ``model``'s field without regard to case
    (``QUEUE`` is ``queue``; of two keys naming one field the first is kept). Keys that name no
    field are kept as given, for validation to refuse."""
    fields = {name.lower(): name for name in model.model_fields}
    out: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in values.items():
        name = fields.get(key.lower())
        if name is None:
            extra[key] = value
        elif name not in out:
            out[name] = value
    return {**out, **extra}


def deep_update(base: Mapping[str, Any], *updates: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``updates`` laid over it in turn: tables are merged key by key, anything
    else (lists too) is replaced."""
    merged = dict(base)
    for update in updates:
        for key, value in update.items():
            old = merged.get(key)
            if isinstance(old, dict) and isinstance(value, dict):
                merged[key] = deep_update(old, value)
            else:
                merged[key] = value
    return merged
