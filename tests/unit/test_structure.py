"""The package's shape, as ARCHITECTURE.md draws it: layers that import only downwards, and no import cycle.

Every ``import worker...`` in ``worker/`` counts, wherever it stands: at the top
of a module, inside a function, or under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "worker"

#: Lowest first. A module may import modules of its own layer or of layers below, never above.
LAYERS: list[tuple[str, ...]] = [
    ("worker.waits", "worker.dependencies"),
    ("worker.backends",),
    ("worker.observability",),
    ("worker.settings",),
    ("worker.bindings",),
    ("worker.model", "worker.context"),
    ("worker.message",),
    ("worker.invocation",),
    ("worker.middleware",),
    ("worker.app", "worker.spark"),
    ("worker.runtime",),
    ("worker.compat",),
    ("worker.ops",),
    ("worker", "worker.__main__"),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The worker modules ``name`` imports (``from worker.x import y`` counts as worker.x.y when that is a module)."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "worker")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "worker":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    """The index of the layer whose longest prefix matches ``name``."""
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    return best


def test_every_module_belongs_to_a_layer() -> None:
    assert [name for name in MODULES if layer_of(name) < 0] == []


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = sorted(
        f"{name} (layer {LAYERS[layer_of(name)][0]}) imports {target} (layer {LAYERS[layer_of(target)][0]})"
        for name, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(name)
    )
    assert upward == []


def test_there_is_no_import_cycle() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert [" -> ".join(c) for c in cycles] == []


@pytest.mark.parametrize("package", sorted(n for n, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_it_holds(package: str) -> None:
    docstring = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert docstring and len(docstring) > 40, f"{package} needs a docstring saying what it holds and may import"


def test_the_checker_sees_an_upward_import_and_a_cycle() -> None:
    """The checks above would fail on the shapes they guard against (they are not vacuous)."""
    assert layer_of("worker.runtime.host") > layer_of("worker.middleware.builtin") > layer_of("worker.model")
    assert "worker.model" in GRAPH["worker.runtime.dispatcher"]
    assert "worker.ops.preflight" in GRAPH["worker.ops.host_process"]  # `from worker.ops import preflight` resolves
