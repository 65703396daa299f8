"""Every app and command in the documentation runs as written, so that the examples cannot rot.

The blocks of one page run in order in one scratch folder of their own (tests/docs/blocks.py says which run and
how a page marks the others), with the ``worker`` command of this checkout on PATH, as a reader's shell has it:

- a ``python`` block that makes an app (``WorkerApp()`` or ``FunctionApp()``) is written as function_app.py and
  run with ``worker run --burst``, which loads it, checks every binding, and runs what is on its queues;
  ``AzureWebJobsStorage`` is the embedded queue, as ``worker init``'s local.settings.json sets it. Another
  ``python`` block runs with the interpreter;
- a ``sh`` block runs in bash with ``set -e``; ``README.md``'s blocks run where ``.venv`` is this checkout's;
- a ``yaml`` or ``json`` block that is a settings file (its keys are host.yaml's) is loaded as host.yaml or
  host.json is, and must load without an error.

Files from tests/docs/stubs/ (the modules an example imports as the app's own code, such as ``exports``) are in
every page's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.blocks import REPO, RUN, Block, blocks, pages
from tests.host.processes import worker_environment
from worker.ops import scaffold
from worker.settings.config import load_config

STUBS = Path(__file__).resolve().parent / "stubs"
#: The top-level keys of a settings file: a yaml or json block with others is not one, and is only parsed.
SETTINGS_KEYS = {
    "version",
    "functionTimeout",
    "extensions",
    "worker",
    "retry",
    "functions",
    "spark",
    "logging",
    "connections",
}
PAGES = {str(path.relative_to(REPO)): path for path in pages()}


def environment() -> dict[str, str]:
    env = worker_environment(AzureWebJobsStorage="sqlite:///.worker/queues.sqlite3")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def run(block: Block, command: list[str], folder: Path) -> None:
    done = subprocess.run(command, cwd=folder, env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{block.code}\n{done.stdout}\n{done.stderr}"


def run_block(block: Block, folder: Path) -> None:
    if block.skip is not None:
        return
    if block.init_file is not None:
        assert block.code == scaffold.FILES[block.init_file], f"{block.where} differs from worker init's file"
        return
    if block.file is not None:
        (folder / block.file).write_text(block.code, encoding="utf-8")
        return
    if block.language == "python":
        if "WorkerApp()" in block.code or "FunctionApp()" in block.code:
            (folder / "function_app.py").write_text(block.code, encoding="utf-8")
            run(block, [sys.executable, "-m", "worker", "run", "--burst"], folder)
        else:
            run(block, [sys.executable, "-c", block.code], folder)
    elif block.language in ("sh", "bash"):
        run(block, ["bash", "-e", "-c", block.code], folder)
    elif block.language in ("yaml", "json"):
        data = yaml.safe_load(block.code) if block.language == "yaml" else json.loads(block.code)
        if isinstance(data, dict) and set(data) <= SETTINGS_KEYS:
            settings = folder / "settings-check" / ("host.yaml" if block.language == "yaml" else "host.json")
            settings.parent.mkdir(exist_ok=True)
            settings.write_text(block.code, encoding="utf-8")
            load_config(settings, environ={})


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "page", sorted(name for name, path in PAGES.items() if any(b.language in RUN and b.skip is None for b in blocks(path)))
)
def test_the_pages_apps_and_commands_run_as_written(page: str, tmp_path: Path) -> None:
    folder = tmp_path / "page"
    shutil.copytree(STUBS, folder)
    if page == "README.md":
        (folder / ".venv").symlink_to(REPO / ".venv")
    for block in blocks(PAGES[page]):
        run_block(block, folder)


def test_every_block_that_is_not_run_says_why() -> None:
    for path in PAGES.values():
        for block in blocks(path):
            if block.skip is not None:
                assert len(block.skip) > 10, f"{block.where}: say why the block is not run"
                assert block.language in RUN, f"{block.where}: only a block that would run needs a skip marker"
