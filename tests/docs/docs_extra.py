"""``mkdocs build`` with nothing importable beyond what ``pip install -e '.[docs]'`` installs.

The suite's virtualenv holds every extra (Spark, OpenTelemetry, the test tools), so a hook that imports one of them
would build here and fail for a writer who installed the ``docs`` extra only. Run as
``python -m tests.docs.docs_extra build --strict ...``, this module works out the distributions that install brings
(the requirements and the ``docs`` extra of the project's pyproject.toml, followed through each distribution's
requirements as installed here), puts a finder first on ``sys.meta_path`` that refuses any module of another
distribution with an ``ImportError`` naming both, and runs mkdocs' command line. Modules of no distribution (the
standard library, the repository's own ``worker`` and ``docs/hooks``) are left alone.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
EXTRA = "docs"


def closure(pyproject: Path = PYPROJECT, extra: str = EXTRA) -> set[str]:
    """The canonical names of the distributions ``pip install -e '.[extra]'`` installs, as installed here.

    The project's own requirements come from ``pyproject`` (the installed metadata may be older than the file)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = {canonicalize_name(project["name"])}
    todo = [(line, frozenset({""})) for line in [*project["dependencies"], *project["optional-dependencies"][extra]]]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        line, extras = todo.pop()
        requirement = Requirement(line)
        if requirement.marker is not None and not any(requirement.marker.evaluate({"extra": chosen}) for chosen in extras):
            continue
        name, wanted = canonicalize_name(requirement.name), frozenset(requirement.extras) | {""}
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        found.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [(requirement, wanted) for requirement in requires]
    return found


class Refuse(importlib.abc.MetaPathFinder):
    """Refuses the top-level modules of distributions outside ``allowed``."""

    def __init__(self, allowed: set[str]) -> None:
        self.owners = {
            module: {canonicalize_name(dist) for dist in dists}
            for module, dists in importlib.metadata.packages_distributions().items()
        }
        self.allowed = allowed
        self.refused: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        top = fullname.partition(".")[0]
        owners = self.owners.get(top)
        if top in sys.stdlib_module_names or not owners or owners & self.allowed:
            return None
        self.refused.add(top)
        raise ImportError(
            f"{fullname} comes from {', '.join(sorted(owners))}, which pip install -e '.[{EXTRA}]' does not install",
            name=fullname,
        )


def main(argv: list[str]) -> None:
    sys.meta_path.insert(0, Refuse(closure()))
    from mkdocs.__main__ import cli

    cli.main(args=argv, prog_name="mkdocs")


if __name__ == "__main__":
    main(sys.argv[1:])
