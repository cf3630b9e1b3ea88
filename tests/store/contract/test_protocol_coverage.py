"""The contract suite covers the whole store protocol: every public member of Store and Tx (and
of every protocol they inherit from in agentqueue.store) is called directly, on a store or a
transaction, by some contract test.

Members are read from the protocol classes by introspection, so an operation added to a
protocol fails this test until a contract test calls it.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Protocol

from agentqueue.store import Store, Tx

HERE = Path(__file__).parent
STORE_PACKAGE = "agentqueue.store"


def protocol_members(root: type) -> dict[str, type]:
    """Public members (methods and attributes) of ``root`` and of every protocol of the store
    package among its bases, each with the protocol that declares it."""
    members: dict[str, type] = {}
    for cls in root.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        if not cls.__module__.startswith(STORE_PACKAGE):
            continue
        names = [*vars(cls), *inspect.get_annotations(cls)]
        for name in names:
            if not name.startswith("_"):
                members.setdefault(name, cls)
    return members


def _receiver_is_store_or_tx(node: ast.expr) -> bool:
    """``store``, ``tx``, ``rt.store``, ``reopened_store``...: an object of the protocol."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "tx" or name.endswith("store")


def wrappers(conftest: ast.Module) -> set[str]:
    """Module-level functions of the suite's conftest that are named after the operation they
    call (the wide operations, called only through them)."""
    found = set()
    for fn in conftest.body:
        if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == fn.name
                and _receiver_is_store_or_tx(node.func.value)
            ):
                found.add(fn.name)
    return found


def used_members(tree: ast.Module, wrapped: set[str]) -> tuple[set[str], set[str]]:
    """What a test module calls on a store or transaction (``store.name(...)``, ``tx.name(...)``,
    or a wrapper ``name(...)``), and what it reads from one (``store.dialect``)."""
    called: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _receiver_is_store_or_tx(node.value):
            read.add(node.attr)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and _receiver_is_store_or_tx(func.value):
            called.add(func.attr)
        elif isinstance(func, ast.Name) and func.id in wrapped:
            called.add(func.id)
    return called, read


def contract_uses() -> tuple[set[str], set[str]]:
    """Everything the contract test modules call on, and read from, stores and transactions."""
    wrapped = wrappers(ast.parse((HERE / "conftest.py").read_text()))
    called: set[str] = set()
    read: set[str] = set()
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        more_called, more_read = used_members(ast.parse(path.read_text()), wrapped)
        called |= more_called
        read |= more_read
    return called, read


def test_the_protocols_are_read_with_their_inherited_members() -> None:
    """The introspection finds the members of both protocols (methods and attributes), so the
    coverage check below cannot pass by finding nothing."""
    store, tx = protocol_members(Store), protocol_members(Tx)
    assert {"claim", "insert_tasks", "transaction", "dialect", "push_notifications"} <= set(store)
    assert {"lock", "apply", "admit_ids", "purge"} <= set(tx)


def test_every_protocol_member_is_called_by_a_contract_test() -> None:
    """Every public member of Store and Tx is used directly by some contract test; the failure
    names each one that is not, with the protocol that declares it."""
    members = {**protocol_members(Tx), **protocol_members(Store)}
    called, read = contract_uses()
    missing = []
    for name, owner in sorted(members.items()):
        # Methods must be called; plain attributes (dialect, push_notifications) read.
        used = called if callable(getattr(owner, name, None)) else read
        if name not in used:
            missing.append(f"{owner.__qualname__}.{name}")
    assert not missing, "no contract test calls: " + ", ".join(missing)
