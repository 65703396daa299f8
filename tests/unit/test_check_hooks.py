"""The pre-commit hooks run the checks ``make check`` runs before its tests, command for command.

``make check`` and the git hook (``.pre-commit-config.yaml``, put in place by ``.venv/bin/pre-commit install``) are
two lists of the same commands: the formatter's check, the linter, the type checker. Read from both files here, so
that one cannot gain, lose or change a check without the other; and the hook file is one pre-commit accepts, with
hooks of the repository's own (no remote repository: a commit needs no network).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from pre_commit.commands.validate_config import validate_config

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / ".pre-commit-config.yaml"
#: How both files start a tool: the venv's Python, so that each runs the version constraints.txt pins.
VENV_PYTHON = ".venv/bin/python"


def makefile_commands(text: str, target: str) -> list[list[str]]:
    """The ``$(PY) -m ...`` commands of ``target``'s recipe in a Makefile, in order, its variables expanded."""
    variables = dict(re.findall(r"^([A-Z_]+) *[:?]?= *(.*)$", text, re.M))

    def expand(value: str) -> str:
        return re.sub(r"\$\$|\$\((\w+)\)", lambda m: "$" if m[0] == "$$" else expand(variables.get(m[1], m[0])), value)

    found = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert found, f"the Makefile has no {target} target"
    recipe = expand(found[1].replace("\\\n", " "))
    commands = []
    for part in re.split(r"&&|\|\||;", recipe):
        words = shlex.split(part)
        while words and re.fullmatch(r"\w+=\S*", words[0]):  # an environment setting before the command
            words.pop(0)
        if words[:2] == [VENV_PYTHON, "-m"]:
            commands.append(words[2:])
    return commands


def hook_commands(config: dict[str, object]) -> list[list[str]]:
    """Each hook's command, checking that it is the repository's own and runs on the whole tree."""
    commands = []
    repos = config["repos"]
    assert isinstance(repos, list)
    for repo in repos:
        assert repo["repo"] == "local", f"{repo['repo']}: hooks are fetched at commit time; keep them local"
        for hook in repo["hooks"]:
            assert hook["language"] == "system", f"{hook['id']}: run with the venv's tools, not an environment of its own"
            assert hook.get("pass_filenames") is False, f"{hook['id']}: checks the tree, as make check does"
            words = shlex.split(hook["entry"])
            assert words[:2] == [VENV_PYTHON, "-m"], f"{hook['id']}: runs {words[0]}, not the venv's tool"
            commands.append(words[2:])
    return commands


def test_the_hooks_run_make_checks_checks_in_its_order() -> None:
    made = makefile_commands((ROOT / "Makefile").read_text(encoding="utf-8"), "check")
    tools = [command[0] for command in made]
    assert "pytest" in tools, "make check runs the fast tier"
    checks = made[: tools.index("pytest")]
    assert [command[:2] for command in checks] == [["ruff", "format"], ["ruff", "check"], ["mypy"]]
    assert "--check" in checks[0], "make check checks the format, it does not rewrite files"
    assert hook_commands(yaml.safe_load(HOOKS.read_text(encoding="utf-8"))) == checks


def test_pre_commit_accepts_the_hook_file(capsys: pytest.CaptureFixture[str]) -> None:
    """What ``pre-commit validate-config`` runs, in this process."""
    assert validate_config([str(HOOKS)]) == 0, capsys.readouterr().out
