"""Names a package loads from its modules on first use (PEP 562), so that importing the package
(the command line does on every start) does not import what a command never touches."""

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
