"""Package docstrings tell the truth about their modules: every module a package's docstring names exists, and every
module (or subpackage) of the package is named in it.

A docstring names a module as ``:mod:`.name``` (or ``:mod:`worker.package.name```), or as ``name`` or ``name.py``
in backticks; a ``:mod:`` reference or a ``name.py`` in backticks must be a module that exists (a file named with
its folder, ``tests/tiers.py``, is not taken for one).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "worker"
PACKAGES = sorted(init.parent for init in ROOT.rglob("__init__.py"))

MOD_REFERENCE = re.compile(r":mod:`~?([\w.]+)`")
BACKTICKED = re.compile(r"``?([\w./]+)``?")


def dotted(package: Path) -> str:
    return ".".join(package.relative_to(ROOT.parent).parts)


def children(package: Path) -> set[str]:
    """The package's own modules and subpackages, by name."""
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in package.iterdir() if (p / "__init__.py").is_file()
    }


def exists(name: str) -> bool:
    """Whether ``worker.a.b`` is a module or package of the code."""
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_every_module_a_package_docstring_names_exists(package: Path) -> None:
    text, here = docstring(package), dotted(package)
    named = [here + ref if ref.startswith(".") else ref for ref in MOD_REFERENCE.findall(text)]
    # A file named with its folder (``tests/tiers.py``) is not one of the package's modules.
    named += [
        f"{here}.{token.removesuffix('.py')}"
        for token in BACKTICKED.findall(text)
        if token.endswith(".py") and "/" not in token
    ]
    # An attribute of a module (:mod:`worker.x.y` where y is a function) is named by its module.
    assert [name for name in named if not exists(name) and not exists(name.rpartition(".")[0])] == []


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_every_module_of_a_package_is_named_in_its_docstring(package: Path) -> None:
    text, here = docstring(package), dotted(package)
    named = {ref.removeprefix(".").removeprefix(here + ".").split(".")[0] for ref in MOD_REFERENCE.findall(text)}
    named |= {
        token.removesuffix(".py").removesuffix("/").removeprefix(here + ".").split(".")[0]
        for token in BACKTICKED.findall(text)
    }
    assert sorted(children(package) - named) == []
