"""Names a package loads from its modules on first use (PEP 562), and modules a module imports at
their first use (LazyModule), so that importing them (the command line does on every start) does
not import what a command never touches."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``where`` is imported from its
    module (relative to ``package``) and kept in ``namespace``; any other is an AttributeError."""

    def load(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return load


class LazyModule:
    """Stands for the module ``name`` (absolute), imported at the first use of one of its
    attributes, so that a module naming it costs nothing to a command that never calls it
    (start-up time). Every attribute is looked up in the module itself, so what is patched there
    is seen here; the import is the interpreter's own (safe from any thread)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
