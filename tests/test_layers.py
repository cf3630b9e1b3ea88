"""ARCHITECTURE rule 12: no import circles, and no lower layer importing a higher one.

Every import in src/agentqueue counts, those under ``if TYPE_CHECKING:`` and inside functions
too: a circle that only type checking closes is still a circle a reader has to hold in mind.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "agentqueue"

LAYERS: dict[str, int] = {
    "domain": 0,
    "clock": 1,
    "lazy": 0,
    "heap": 0,
    "ids": 1,
    "spec": 1,
    "config": 1,
    "prompts": 1,
    "envsettings": 1,
    "unconfigured": 0,
    "logsetup": 1,
    "tracing": 1,
    "intake": 1,
    "supervise": 1,
    "store": 2,
    "pipelines": 3,
    "wakeups": 3,
    "service": 4,
    "executors": 4,
    "delivery": 5,
    "scheduler": 6,
    "worker": 7,
    "queue": 8,
    "api": 9,
    "dashboard": 9,
    "bench": 9,
    "client": 9,
    "cli": 9,
    # The command's entry point: the collector off while it starts, then the CLI.
    "launch": 9,
    # The package itself (agentqueue/__init__.py): the public names and __version__, which the
    # shells read (the circle check keeps it from importing them back).
    "": 9,
    "__main__": 10,
}
"""domain < store < service < scheduler, and executors < worker < queue < api, dashboard, cli
(ARCHITECTURE rule 12), and the HTTP client beside the API it speaks to; the helpers each of
them may use sit below. A higher number may import
a lower one, never the other way round."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import of an agentqueue module in ``path``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    yield _known(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                # ``from .service import actions`` imports the module service.actions.
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else _known(target)), node.lineno


def _known(module: str) -> str:
    while module not in MODULES and "." in module:
        module = module.rpartition(".")[0]
    return module


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        edges = graph.setdefault(name, {})
        for target, line in _imports(name, path):
            if target != name:
                edges.setdefault(target, line)
    return graph


def _layer(module: str) -> tuple[str, int]:
    part = module.split(".")[1] if "." in module else ""
    assert part in LAYERS, f"{module}: no layer given for {part!r} in tests/test_layers.py"
    return part, LAYERS[part]


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_no_lower_layer_imports_a_higher_one() -> None:
    wrong = []
    for module, edges in _graph().items():
        part, rank = _layer(module)
        for target, line in edges.items():
            target_part, target_rank = _layer(target)
            if target_rank > rank:
                wrong.append(f"{module}:{line} imports {target} ({part} < {target_part})")
    assert not wrong, "\n".join(wrong)


def test_no_import_circles() -> None:
    graph = _graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in graph.get(module, {}):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_the_checker_sees_a_circle_and_a_layer_breach() -> None:
    """The checks above would catch what they are for: the import of the queue the worker
    used to make, and the circle it closed."""
    graph = _graph()
    graph.setdefault("agentqueue.worker.runner", {})["agentqueue.queue"] = 1
    _part, rank = _layer("agentqueue.worker.runner")
    assert _layer("agentqueue.queue")[1] > rank
    assert "agentqueue.worker.runner" in _reachable(graph, "agentqueue.queue")


def _reachable(graph: dict[str, dict[str, int]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, {}):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen
