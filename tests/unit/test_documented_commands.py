"""The commands the README and the demo tell people to type work as typed, from the repository's root.

``make run`` installs pyproject's ``worker`` console script into the Makefile's
``.venv``, which a fresh shell does not have on its PATH: the commands say
``.venv/bin/worker``, or activate the venv first (``. .venv/bin/activate``), as the README's first app does.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from tests.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
WORKER = ".venv/bin/worker"


def test_the_venv_is_where_the_makefile_puts_the_console_script() -> None:
    assert re.search(r"^VENV := \.venv$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["worker"] == "worker.ops.cli:main"


def test_readme_shell_blocks_run_the_venvs_worker() -> None:
    """Each block names ``.venv/bin/worker``, or activates ``.venv`` before it types ``worker``."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    workers = set()
    for block in blocks:
        activated = False
        for line in block.splitlines():
            words = line.split()
            if words[:2] == [".", ".venv/bin/activate"]:
                activated = True
            elif words and words[0].endswith("worker"):
                workers.add("worker (activated)" if activated and words[0] == "worker" else words[0])
    assert workers <= {WORKER, "worker (activated)"} and workers


def test_the_demos_poison_hint_is_a_command_that_runs(tmp_path: Path) -> None:
    source = (ROOT / "functions" / "demo.py").read_text(encoding="utf-8")
    [hint] = re.findall(r"poisoned messages: ([^\"]+)\"", source)
    program, *args = shlex.split(hint)

    assert program == WORKER
    ran = run_cli(tmp_path, *args)
    assert ran.returncode == 0, ran.stderr
