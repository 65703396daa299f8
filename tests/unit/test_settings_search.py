"""Every ``worker`` command finds the same settings file, and so the same embedded queue file (worker/ops/locate.py).

A command run from a subfolder of the app used to read no settings file and
make a second queue file there, which the running worker never reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import Ran, run_cli

QUEUE_FILE = Path(".worker") / "queues.sqlite3"


def ok(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    ran = run_cli(cwd, *args, env=env)
    assert ran.returncode == 0, ran.stderr
    return ran


def app_with_subfolder(tmp_path: Path) -> tuple[Path, Path]:
    """An app folder with a host.yaml, and a folder two levels below it."""
    app = tmp_path / "app"
    deeper = app / "sub" / "deeper"
    deeper.mkdir(parents=True)
    (app / "host.yaml").write_text("extensions:\n  queues:\n    messageEncoding: none\n", encoding="utf-8")
    return app, deeper


def test_send_from_a_subfolder_reaches_the_queue_file_beside_host_yaml_and_says_it_creates_it(tmp_path: Path) -> None:
    app, deeper = app_with_subfolder(tmp_path)

    sent = ok(deeper, "send", "jobs", "from below")

    assert sent.stderr == f"creating a new embedded queue file at {app / QUEUE_FILE}\n"
    assert (app / QUEUE_FILE).is_file()
    assert not (deeper / ".worker").exists() and not (app / "sub" / ".worker").exists()
    peeked = ok(app, "peek", "jobs", "--json")
    assert [row["body"] for row in json.loads(peeked.stdout)] == ["from below"]
    assert peeked.stderr == f"embedded queue: {app / QUEUE_FILE}\n"  # there now: no creation notice


def test_queues_names_the_file_on_stderr_and_keeps_stdout_parseable(tmp_path: Path) -> None:
    app, deeper = app_with_subfolder(tmp_path)
    ok(app, "send", "jobs", "x")

    listed = ok(deeper, "queues", "--json")

    assert json.loads(listed.stdout) == [{"name": "jobs", "approximateMessageCount": 1}]
    assert listed.stderr == f"embedded queue: {app / QUEUE_FILE}\n"


@pytest.mark.parametrize("marker", [".git/", ".git", "pyproject.toml"], ids=["git-folder", "git-file", "pyproject"])
def test_the_search_ends_at_the_project_root(tmp_path: Path, marker: str) -> None:
    """A settings file above the project's root belongs to something else (``.git`` is a file in a worktree)."""
    (tmp_path / "host.yaml").write_text("extensions:\n  queues:\n    messageEncoding: none\n", encoding="utf-8")
    project = tmp_path / "project"
    sub = project / "sub"
    sub.mkdir(parents=True)
    if marker.endswith("/"):
        (project / marker).mkdir()
    else:
        (project / marker).write_text("", encoding="utf-8")

    sent = ok(sub, "send", "jobs", "x")

    assert sent.stderr == f"creating a new embedded queue file at {sub / QUEUE_FILE}\n"  # defaults: the current folder
    assert not (tmp_path / ".worker").exists()


def test_the_search_ends_at_the_home_folder(tmp_path: Path) -> None:
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)

    ok(work, "send", "jobs", "x", env={"HOME": str(home)})

    assert (work / QUEUE_FILE).is_file()
    assert not (tmp_path / ".worker").exists()


def test_a_project_roots_own_settings_file_is_found(tmp_path: Path) -> None:
    """The project's root is searched too: the sample app's host.yaml sits at its repository's root."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "host.json").write_text('{"version": "2.0"}', encoding="utf-8")
    functions = tmp_path / "functions"
    functions.mkdir()

    ok(functions, "send", "jobs", "x")

    assert (tmp_path / QUEUE_FILE).is_file()
    assert not (functions / ".worker").exists()
