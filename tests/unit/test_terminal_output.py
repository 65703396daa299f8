"""What the ``worker`` command prints for people: a message cannot drive the operator's terminal.

The hostile body below would retitle the terminal (OSC 0 ... BEL), clear the
screen (CSI 2J) and, after a CR, overwrite the line with text of its own.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests.cli import run_cli
from worker.ops.terminal import printable

HOSTILE = "\x1b]0;owned\x07\x1b[2J\rfake line"
SHOWN = r"\x1b]0;owned\x07\x1b[2J\rfake line"
#: What no printed line may hold: C0 controls but the newline that ends each line, DEL, C1 controls.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param(HOSTILE, SHOWN, id="escape-sequences"),
        pytest.param("a\nb\tc\x00", r"a\nb\tc\x00", id="c0"),
        pytest.param("del\x7f csi\x9b2J nel\x85", r"del\x7f csi\x9b2J nel\x85", id="del-and-c1"),
        pytest.param("bytes \udcff\udcfe", r"bytes \udcff\udcfe", id="lone-surrogates"),
        pytest.param(
            'w\u00f6rld \u2713 \u65e5\u672c \\x1b {"a": 1}',
            'w\u00f6rld \u2713 \u65e5\u672c \\x1b {"a": 1}',
            id="printable-unicode-kept",
        ),
    ],
)
def test_printable_writes_out_control_characters_and_keeps_the_rest(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A folder whose host.yaml stores bodies as they are (messageEncoding: none), so the queue holds the raw text."""
    (tmp_path / "host.yaml").write_text("extensions:\n  queues:\n    messageEncoding: none\n", encoding="utf-8")
    return tmp_path


def shown_lines(cwd: Path, *args: str) -> list[str]:
    ran = run_cli(cwd, *args)
    assert ran.returncode == 0, ran.stderr
    assert not UNSAFE.search(ran.stdout), ran.stdout
    return ran.stdout.splitlines()


@pytest.mark.parametrize("command", [("peek", "orders"), ("poison", "list", "orders")], ids=["peek", "poison-list"])
def test_a_hostile_body_is_shown_escaped_and_given_back_exactly_as_json(app_dir: Path, command: tuple[str, ...]) -> None:
    queue = "orders-poison" if command[0] == "poison" else "orders"
    sent = run_cli(app_dir, "send", queue, HOSTILE)
    assert sent.returncode == 0, sent.stderr

    line, *failure = shown_lines(app_dir, *command)

    # A poison message says after how many attempts and why it failed, on a line of its own (unknown here: a copy
    # sent by hand carries neither).
    assert line.startswith(sent.stdout.strip() + ("  attempts=?" if failure else "  dequeueCount=0"))
    assert line.endswith(SHOWN)
    assert [f.split(":")[0] for f in failure] == (["    last failure"] if command[0] == "poison" else [])
    [row] = json.loads(run_cli(app_dir, *command, "--json").stdout)
    assert row["body"] == HOSTILE


def test_queue_tables_escape_their_cells_and_stay_aligned(app_dir: Path) -> None:
    """A queue name comes from storage, which a host other than this one may have written."""
    assert run_cli(app_dir, "send", "orders", "x").returncode == 0
    with sqlite3.connect(app_dir / ".worker" / "queues.sqlite3") as db:
        db.execute("INSERT INTO queues (name) VALUES (?)", ("evil\x1b[2J\rname",))

    lines = shown_lines(app_dir, "queues")

    assert [line.split() for line in lines] == [["queue", "messages"], [r"evil\x1b[2J\rname", "0"], ["orders", "1"]]
    assert len({len(line) for line in lines}) == 1
