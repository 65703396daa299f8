"""Pages made at build time from files at the repository's root, so that the site shows them as they are committed.

- ``changelog.md``: CHANGELOG.md, whole.
- ``examples.md``: every folder of ``examples/``, in order, with its README.md when it has one and its app's
  docstring otherwise, the command that runs it, and its files in full (the app and its settings). A folder added to
  ``examples/`` appears without touching this page; ``tests/docs/test_examples.py`` runs each.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: The files of an example shown in full, in this order, with the language their block is highlighted as.
SHOWN = {"function_app.py": "python", "host.yaml": "yaml", "host.json": "json", "local.settings.json": "json"}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "changelog.md", content=(REPO / "CHANGELOG.md").read_text(encoding="utf-8")))
    files.append(File.generated(config, "examples.md", content=examples_page()))
    return files


def examples_page() -> str:
    lines = [
        "# Examples",
        "",
        "Small apps in the repository's `examples/` folder, each a folder that runs as it is: copy it, `cd` into it,",
        "send it messages and run it, as each says below. The test suite runs every one of them "
        "(`tests/docs/test_examples.py`).",
        "",
    ]
    for folder in folders():
        lines += [f"## `{folder.name}/`", "", about(folder), ""]
        for name, language in SHOWN.items():
            if (folder / name).is_file():
                code = (folder / name).read_text(encoding="utf-8").rstrip("\n")
                lines += [f'```{language} title="examples/{folder.name}/{name}"', code, "```", ""]
    return "\n".join(lines)


def folders() -> list[Path]:
    found = sorted(path for path in EXAMPLES.iterdir() if path.is_dir() and not path.name.startswith((".", "_")))
    if not found:
        raise PluginError(f"examples page: no example folder in {EXAMPLES}")
    return found


def about(folder: Path) -> str:
    """The folder's README.md (its first heading dropped: the page gives the folder's own), or its app's docstring."""
    readme = folder / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8").strip()
        return text.split("\n", 1)[1].strip() if text.startswith("# ") else text
    app = folder / "function_app.py"
    docstring = ast.get_docstring(ast.parse(app.read_text(encoding="utf-8"))) if app.is_file() else None
    if not docstring:
        raise PluginError(
            f"examples page: {folder.relative_to(REPO)} has neither a README.md nor a docstring in "
            "function_app.py: write one, it is what the page says of the example"
        )
    return docstring
