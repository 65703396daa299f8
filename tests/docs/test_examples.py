"""Every app of examples/ runs as its README row says: a copy of its folder, the messages sent with ``worker
send``, then ``worker run --burst``, each a real process, and what each app should leave behind checked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.processes import worker_environment

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def worker(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=folder,
        env=worker_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"worker {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def stats(folder: Path) -> dict[str, tuple[int, int]]:
    rows = json.loads(worker(folder, "stats", "--json").stdout)
    return {row["queue"]: (row["messages"], row["poison"]) for row in rows}


def test_every_example_folder_is_tested() -> None:
    folders = {path.name for path in EXAMPLES.iterdir() if path.is_dir() and not path.name.startswith(".")}
    tested = {name.removeprefix("test_").removesuffix("_example") for name in globals() if name.startswith("test_")}
    assert folders <= tested, folders - tested
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}/`" in readme for name in folders)


@pytest.fixture
def copy(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    name = request.node.name.removeprefix("test_").removesuffix("_example")
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


@pytest.mark.subprocess
def test_hello_example(copy: Path) -> None:
    worker(copy, "send", "hello", "world")
    ran = worker(copy, "run", "--burst")
    assert "hello, world" in ran.stderr
    assert stats(copy) == {"hello": (0, 0)}


@pytest.mark.subprocess
def test_chain_example(copy: Path) -> None:
    worker(copy, "send", "orders", '{"orderId": "A-1", "items": [{"sku": "pen", "price": 2.5, "quantity": 4}]}')
    ran = worker(copy, "run", "--burst")
    assert "invoice for order A-1: 10.00" in ran.stderr
    assert json.loads((copy / ".worker" / "blobs" / "receipts" / "A-1.json").read_text()) == {
        "orderId": "A-1",
        "total": 10.0,
    }
    assert stats(copy) == {"orders": (0, 0), "invoices": (0, 0)}


@pytest.mark.subprocess
def test_poison_example(copy: Path) -> None:
    worker(copy, "send", "payments", '{"amount": 10}', '{"amount": -5}', "not json")
    ran = worker(copy, "run", "--burst")
    assert "paid 10 (attempt 1)" in ran.stderr
    listed = worker(copy, "poison", "list", "payments", "--json")
    assert sorted(message["body"] for message in json.loads(listed.stdout)) == sorted(['{"amount": -5}', "not json"])
    assert stats(copy) == {"payments": (0, 2)}


@pytest.mark.subprocess
def test_functions_v2_example(copy: Path) -> None:
    worker(copy, "send", "tasks", "hello")
    ran = worker(copy, "run", "--burst")
    assert "work: hello (attempt 1)" in ran.stderr
    peeked = worker(copy, "peek", "done", "--json")
    assert [message["body"] for message in json.loads(peeked.stdout)] == ["HELLO"]
