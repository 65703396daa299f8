"""An embedded queue file, or its folder, that cannot be written: one line saying read-only (exit 2), nothing lost.

Permission bits do not stop root, so under root the file or folder is put on a
read-only bind mount in a mount namespace of the command's own (it ends with
the command, and nothing else sees it): a real read-only filesystem, which
stops root as it stops everyone. Under another user its write permission is
taken away for the command and given back after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.host.processes import worker_environment

QUEUE_FILE = Path(".worker") / "queues.sqlite3"
#: Puts "$1" on a read-only bind mount, then runs the rest of the arguments in the current folder as seen through it.
READ_ONLY_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && cd "$PWD" && exec "$@"'


def _mount_namespaces() -> str | None:
    """Why a private read-only mount cannot be made here, or None."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"no mount namespace for root: {probe.stderr.strip()}"


@contextmanager
def read_only(target: Path) -> Iterator[list[str]]:
    """The command prefix that runs a program with ``target`` read-only to it, even under root."""
    if os.geteuid() != 0:
        mode = target.stat().st_mode
        target.chmod(mode & ~0o222)
        try:
            yield []
        finally:
            target.chmod(mode)
        return
    if (missing := _mount_namespaces()) is not None:
        pytest.skip(missing)
    yield ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_MOUNT, "sh", str(target)]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("read_only_part", "command", "expected"),
    [
        pytest.param(QUEUE_FILE, ("send", "jobs", "second"), "embedded queue file {file} is read-only", id="file"),
        pytest.param(QUEUE_FILE.parent, ("peek", "jobs"), "embedded queue file {file} is read-only", id="folder"),
        pytest.param(
            Path("."),
            ("send", "jobs", "second"),
            "folder {app} of embedded queue file {file} is read-only",
            id="app-folder-without-a-file",
        ),
    ],
)
def test_a_read_only_queue_file_or_folder_is_one_line_and_exit_2(
    tmp_path: Path, read_only_part: Path, command: tuple[str, ...], expected: str
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "host.yaml").write_text("extensions:\n  queues:\n    messageEncoding: none\n", encoding="utf-8")
    file = app / QUEUE_FILE
    if read_only_part != Path("."):
        assert run_cli(app, "send", "jobs", "first").returncode == 0

    with read_only(app / read_only_part) as prefix:
        ran = subprocess.run(
            [*prefix, sys.executable, "-m", "worker", *command],
            cwd=app,
            env=worker_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert ran.returncode == 2, ran.stderr
    assert ran.stderr == f"worker {command[0]}: error: {expected.format(file=file, app=app)}\n"
    if read_only_part == Path("."):
        assert not (app / ".worker").exists()
    else:
        [row] = json.loads(run_cli(app, "peek", "jobs", "--json").stdout)
        assert row["body"] == "first"
