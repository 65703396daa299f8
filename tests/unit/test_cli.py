"""The ``worker`` command, run through ``main(argv)`` in a temporary folder (tests/cli.py says why in-process).

Each test works in its own ``tmp_path``: ``host.yaml`` (when there is one) sits
there, so the embedded queue file lands in ``tmp_path/.worker/queues.sqlite3``
and never in the repository.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli import Ran, run_cli

QUEUE_FILE = Path(".worker") / "queues.sqlite3"
SEVEN_DAYS = timedelta(days=7)


def worker(cwd: Path, *args: str) -> Ran:
    """Run ``worker ARGS`` in ``cwd``, in-process, with an environment that cannot point it elsewhere."""
    return run_cli(cwd, *args)


def ok(cwd: Path, *args: str) -> str:
    """Run a command that must succeed; return its stdout."""
    result = worker(cwd, *args)
    assert result.returncode == 0, f"worker {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def peek_json(cwd: Path, queue: str, *args: str) -> list[dict[str, Any]]:
    return json.loads(ok(cwd, "peek", queue, "--json", *args))


def write_host_yaml(folder: Path, encoding: str, name: str = "host.yaml") -> Path:
    path = folder / name
    path.write_text(f"extensions:\n  queues:\n    messageEncoding: {encoding}\n", encoding="utf-8")
    return path


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A folder with a host.yaml storing messages as plain text (messageEncoding: none)."""
    write_host_yaml(tmp_path, "none")
    return tmp_path


# -- send and peek ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["base64", "none"])
def test_send_then_peek_round_trips_bodies(tmp_path: Path, encoding: str) -> None:
    write_host_yaml(tmp_path, encoding)
    # raw.yaml shares the folder (so the queue file) but shows the stored wire text undecoded.
    write_host_yaml(tmp_path, "none", name="raw.yaml")
    bodies = ["hello", "w\u00f6rld \u2713", '{"order": 42}']

    ids = ok(tmp_path, "send", "orders", *bodies).splitlines()

    assert len(ids) == len(bodies)
    assert len(set(ids)) == len(bodies)
    assert (tmp_path / QUEUE_FILE).is_file()
    rows = peek_json(tmp_path, "orders")
    assert [row["id"] for row in rows] == ids
    assert [row["body"] for row in rows] == bodies
    for row in rows:
        assert set(row) == {"id", "dequeueCount", "insertionTime", "expirationTime", "body"}
        assert row["dequeueCount"] == 0
        inserted = datetime.fromisoformat(row["insertionTime"])
        expires = datetime.fromisoformat(row["expirationTime"])
        assert inserted.utcoffset() == timedelta(0)
        assert abs(expires - inserted - SEVEN_DAYS) < timedelta(seconds=1)  # the default time to live

    wire = [row["body"] for row in peek_json(tmp_path, "orders", "--config", "raw.yaml")]
    if encoding == "base64":
        assert wire == [base64.b64encode(b.encode("utf-8")).decode("ascii") for b in bodies]
    else:
        assert wire == bodies


def test_without_host_yaml_uses_defaults_in_the_current_folder(tmp_path: Path) -> None:
    """No host.yaml: base64 (the Functions default) and the queue file under the current folder."""
    ok(tmp_path, "send", "jobs", "payload")

    assert (tmp_path / QUEUE_FILE).is_file()
    assert [row["body"] for row in peek_json(tmp_path, "jobs")] == ["payload"]
    write_host_yaml(tmp_path, "none", name="raw.yaml")
    raw = peek_json(tmp_path, "jobs", "--config", "raw.yaml")
    assert [row["body"] for row in raw] == [base64.b64encode(b"payload").decode("ascii")]


def test_queue_file_lands_beside_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    write_host_yaml(conf, "none")

    ok(tmp_path, "send", "--config", "conf/host.yaml", "jobs", "x")

    assert (conf / QUEUE_FILE).is_file()
    assert not (tmp_path / ".worker").exists()
    assert [row["body"] for row in peek_json(conf, "jobs")] == ["x"]


def test_delayed_message_is_counted_but_not_visible(app_dir: Path) -> None:
    ok(app_dir, "send", "--delay", "30s", "later", "soon")

    assert peek_json(app_dir, "later") == []
    counts = json.loads(ok(app_dir, "queues", "--json"))
    assert counts == [{"name": "later", "approximateMessageCount": 1}]


def test_peek_and_poison_list_say_so_when_there_is_nothing_to_show(app_dir: Path) -> None:
    """An empty answer reads as a failure; peek shows only visible messages, so it says when others are held."""
    ok(app_dir, "send", "--delay", "30s", "later", "soon")
    ok(app_dir, "send", "empty-poison", "x")
    ok(app_dir, "poison", "purge", "empty")  # empty-poison is there, and empty

    assert (
        ok(app_dir, "peek", "later") == "queue later has no visible messages; it holds about 1 that are "
        "invisible now (leased by a worker, or sent with a delay)\n"
    )
    assert ok(app_dir, "peek", "empty-poison") == "queue empty-poison is empty\n"
    assert ok(app_dir, "poison", "list", "empty") == "queue empty-poison is empty\n"
    assert ok(app_dir, "poison", "list", "later") == "no poison messages of later (later-poison was never needed)\n"
    assert peek_json(app_dir, "empty-poison") == []


def test_ttl_minus_one_never_expires(app_dir: Path) -> None:
    ok(app_dir, "send", "--ttl", "-1", "forever", "x")

    [row] = peek_json(app_dir, "forever")
    assert row["expirationTime"] is None
    assert row["body"] == "x"


def test_ttl_sets_expiration_after_insertion(app_dir: Path) -> None:
    ok(app_dir, "send", "--ttl", "1h", "hourly", "x")

    [row] = peek_json(app_dir, "hourly")
    lived = datetime.fromisoformat(row["expirationTime"]) - datetime.fromisoformat(row["insertionTime"])
    assert abs(lived - timedelta(hours=1)) < timedelta(seconds=1)


# -- queues -----------------------------------------------------------------------------------------------------


def test_queues_lists_names_and_counts(app_dir: Path) -> None:
    ok(app_dir, "send", "beta", "1", "2", "3")
    ok(app_dir, "send", "alpha-1", "1")

    rows = json.loads(ok(app_dir, "queues", "--json"))
    assert rows == [
        {"name": "alpha-1", "approximateMessageCount": 1},
        {"name": "beta", "approximateMessageCount": 3},
    ]
    plain = [line.split() for line in ok(app_dir, "queues").splitlines()]
    assert plain == [["queue", "messages"], ["alpha-1", "1"], ["beta", "3"]]


def test_queues_with_no_queues_is_empty(app_dir: Path) -> None:
    assert json.loads(ok(app_dir, "queues", "--json")) == []


# -- errors -----------------------------------------------------------------------------------------------------


def test_peek_of_a_missing_queue_exits_1_naming_it(app_dir: Path) -> None:
    result = worker(app_dir, "peek", "nosuch-queue")

    assert result.returncode == 1
    assert "nosuch-queue" in result.stderr
    assert "does not exist" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["send", "peek"])
@pytest.mark.parametrize("name", ["Bad_Name", "ab", "double--hyphen", "orders\n"])
def test_invalid_queue_name_exits_2(app_dir: Path, command: str, name: str) -> None:
    args = [command, name, "x"] if command == "send" else [command, name]

    result = worker(app_dir, *args)

    assert result.returncode == 2, result.stderr
    assert f"queue name {name!r} is not valid" in result.stderr
    assert "3-63 lowercase letters" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and not (app_dir / QUEUE_FILE).exists()  # refused before anything


def test_run_refuses_a_trigger_queue_whose_poison_queue_the_service_refuses(tmp_path: Path) -> None:
    """A poisoned message of such a queue could never settle: it would come back every lease, for ever."""
    queue = "q" * 60
    (tmp_path / "long_queue_app.py").write_text(
        "from worker import WorkerApp\n\napp = WorkerApp()\n\n\n"
        f"@app.queue_trigger(arg_name='msg', queue_name='{queue}')\ndef orders(msg: str) -> None:\n    pass\n",
        encoding="utf-8",
    )
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")

    result = worker(tmp_path, "run", "--no-supervisor", "--burst", "--app", "long_queue_app:app")

    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if f"'{queue}-poison'" in line]
    assert "function orders, trigger queueTrigger (msg): its poison queue" in line
    assert "must leave room for '-poison' (60 characters now)" in line
    assert "Traceback" not in result.stderr and not (tmp_path / QUEUE_FILE).exists()


@pytest.mark.parametrize(("encoding", "largest"), [("none", 64 * 1024), ("base64", 48 * 1024)])
def test_body_over_64_kib_exits_2_naming_the_limit(tmp_path: Path, encoding: str, largest: int) -> None:
    """The limit is on the stored text, so under base64 the largest body is 3/4 of 64 KiB."""
    write_host_yaml(tmp_path, encoding)
    ok(tmp_path, "send", "big", "a" * largest)

    result = worker(tmp_path, "send", "big", "a" * (largest + 1))

    assert result.returncode == 2
    assert "64 KiB" in result.stderr
    assert "65536" in result.stderr
    assert json.loads(ok(tmp_path, "queues", "--json")) == [{"name": "big", "approximateMessageCount": 1}]


DELAYS = "a duration from 0s to 7d, such as 30s, 10m, 2h, 1d or hh:mm:ss"
TTLS = "a duration of at least 1s, such as 30s, 10m, 2h, 1d or hh:mm:ss, or -1 (never expires)"


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("--delay", "soon", DELAYS),
        ("--delay", "10 minutes", DELAYS),
        ("--delay", "-5s", DELAYS),
        ("--delay", "8d", DELAYS),
        ("--delay", "7.00:00:01", DELAYS),
        ("--ttl", "0", TTLS),
        ("--ttl", "0s", TTLS),
        ("--ttl", "500ms", TTLS),
        ("--ttl", "abc", TTLS),
        ("--ttl", "-2", TTLS),
    ],
)
def test_a_bad_delay_or_ttl_is_one_line_exit_2_and_makes_nothing(
    app_dir: Path, option: str, value: str, accepted: str
) -> None:
    result = worker(app_dir, "send", f"{option}={value}", "later", "x")

    assert result.returncode == 2
    assert (
        result.stderr == f"worker send: error: argument {option}: expected {accepted}, got {value!r} "
        "(see worker send --help)\n"
    )
    assert not (app_dir / QUEUE_FILE).exists()


@pytest.mark.parametrize("args", [("--delay", "7d"), ("--delay", "2h", "--ttl", "1h")], ids=["default-ttl", "ttl"])
def test_a_delay_not_shorter_than_the_ttl_is_refused_before_anything_is_made(app_dir: Path, args: tuple[str, ...]) -> None:
    result = worker(app_dir, "send", *args, "later", "x")

    assert result.returncode == 2
    assert result.stderr.startswith("worker send: error: --delay must be shorter than --ttl (default 7d)")
    assert len(result.stderr.splitlines()) == 1
    assert not (app_dir / QUEUE_FILE).exists()


def test_the_longest_delay_and_the_shortest_ttl_are_taken(app_dir: Path) -> None:
    ok(app_dir, "send", "--delay", "7d", "--ttl", "-1", "later", "x")
    ok(app_dir, "send", "--ttl", "1s", "--delay", "0s", "brief", "y")

    assert json.loads(ok(app_dir, "queues", "--json")) == [
        {"name": "brief", "approximateMessageCount": 1},
        {"name": "later", "approximateMessageCount": 1},
    ]
    assert peek_json(app_dir, "later") == []


@pytest.mark.parametrize(
    ("command", "limits"),
    [
        (
            ("send",),
            [
                "as stored",
                "48 KiB under base64",
                "OCI Queue: messages up to 256 KiB, 20 a receive",
                "Amazon SQS: messages up to 1 MiB, 10 a receive",
                "0s to 7d",
                "shorter than --ttl",
                "1s or more",
                "-1 never expires",
                "default 7d",
            ],
        ),
        (("peek",), ["1 to what one receive of the backend returns (32 on"]),
        (("poison",), ["N at least 1", "(32 on"]),
    ],
)
def test_help_states_the_limits(tmp_path: Path, command: tuple[str, ...], limits: list[str]) -> None:
    shown = " ".join(ok(tmp_path, *command, "--help").split())  # argparse wraps lines to the terminal's width

    for limit in limits:
        assert limit in shown


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "version: '1.0'\nextensions:\n  queues:\n    batchSize: 40\n",
            ["extensions.queues.batchSize", "host.yaml:4", "between 1 and 32"],
            id="out-of-range",
        ),
        pytest.param(
            "version: '1.0'\nextensions:\n  queues:\n    batchSize: 8\n   maxDequeueCount: 5\n",
            ["not valid YAML", "host.yaml:5"],
            id="syntax",
        ),
    ],
)
def test_malformed_host_yaml_exits_2_naming_key_and_line(tmp_path: Path, text: str, expected: list[str]) -> None:
    (tmp_path / "host.yaml").write_text(text, encoding="utf-8")

    result = worker(tmp_path, "queues")

    assert result.returncode == 2
    for fragment in expected:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("host.yaml", "[" * 600),
        ("host.yaml", "functionTimeout: " + "[" * 600 + "]" * 600),
        ("host.json", "[" * 5000),
        ("local.settings.json", "[" * 5000),
    ],
)
def test_a_settings_file_nested_past_the_recursion_limit_is_one_line_exit_2(tmp_path: Path, name: str, text: str) -> None:
    """Past Python's recursion limit whatever the depth (600 levels of YAML reach it: PyYAML's scanner takes
    seconds for thousands, quadratically)."""
    (tmp_path / name).write_text(text, encoding="utf-8")

    result = worker(tmp_path, "queues")

    assert result.returncode == 2
    assert (
        result.stderr
        == f"worker queues: error: {tmp_path / name}: " + ("" if name == "local.settings.json" else "(syntax): ")
        + "nested too deeply to read: settings nest a few "
        "levels at most\n"
    )


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        ("nosuch.module:app", "cannot import app module 'nosuch.module'"),
        ("json:dumps", "not a worker.WorkerApp"),
        ("badformat:", "--app must look like MODULE or MODULE:ATTR"),
    ],
)
def test_run_with_a_bad_app_exits_2(tmp_path: Path, app: str, expected: str) -> None:
    result = worker(tmp_path, "run", "--no-supervisor", "--burst", "--app", app)

    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args", [("queues",), ("stats", "--json"), ("peek", "orders"), ("poison", "list", "orders")], ids=lambda a: a[0]
)
def test_a_command_that_only_looks_makes_no_queue_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Looking where nothing was sent says so and leaves no empty file behind (before, one appeared, often in the
    wrong folder: a second queue file the worker never reads)."""
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    ran = run_cli(tmp_path, *args)
    queue_file = tmp_path / ".worker" / "queues.sqlite3"
    assert f"no embedded queue file at {queue_file}: nothing has been sent to it yet" in ran.stderr
    assert not (tmp_path / ".worker").exists()
    assert ran.returncode == (1 if args[0] == "peek" else 0), ran.stderr  # peek names a queue that does not exist


def test_send_warns_when_the_app_reads_the_queue_through_another_connection(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text(
        "import azure.functions as func\n\napp = func.FunctionApp()\n\n\n"
        '@app.queue_trigger(arg_name="msg", queue_name="orders", connection="2OrdersStorage")\n'
        "def orders(msg: str) -> None: ...\n\n\n"
        '@app.queue_trigger(arg_name="msg", queue_name="%AUDIT_QUEUE%")\n'
        "def audit(msg: str) -> None: ...\n",
        encoding="utf-8",
    )
    (tmp_path / "host.json").write_text('{"version": "2.0"}', encoding="utf-8")
    orders_store = f"sqlite:///{tmp_path / 'orders.sqlite3'}"

    sent = run_cli(tmp_path, "send", "orders", "x", env={"2OrdersStorage": orders_store})
    assert sent.returncode == 0, sent.stderr  # sent all the same: the user may mean it
    assert "reads queue 'orders' through connection 2OrdersStorage, not AzureWebJobsStorage" in sent.stderr
    assert "--connection 2OrdersStorage" in sent.stderr

    right = run_cli(tmp_path, "send", "orders", "x", "--connection", "2OrdersStorage", env={"2OrdersStorage": orders_store})
    assert right.returncode == 0 and "warning" not in right.stderr, right.stderr
    # The default connection, read through the default: no warning; a queue no function reads: none either.
    audit = run_cli(tmp_path, "send", "audit-log", "x", env={"AUDIT_QUEUE": "audit-log"})
    assert audit.returncode == 0 and "warning" not in audit.stderr, audit.stderr
    other = run_cli(tmp_path, "send", "elsewhere", "x")
    assert other.returncode == 0 and "warning" not in other.stderr, other.stderr


def test_the_queues_a_v1_app_reads_are_found_from_its_function_json_files(tmp_path: Path) -> None:
    from worker.compat.discovery import queue_readers

    for name, binding in (
        ("Orders", {"type": "QueueTrigger", "queueName": "orders", "connection": "Store"}),
        ("Audit", {"type": "queueTrigger", "queueName": "%Q%"}),
        ("Hello", {"type": "httpTrigger"}),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "function.json").write_text(
            json.dumps({"bindings": [{**binding, "direction": "in", "name": "msg"}]}), encoding="utf-8"
        )
    assert queue_readers(tmp_path, {"Q": "audit"}) == {"orders": {"Store"}, "audit": {None}}


def test_send_help_states_each_backends_size_and_batch_limits(tmp_path: Path) -> None:
    """Read from the backends' own limits, so the help never drifts from what is refused."""
    from worker.backends.registry import KINDS

    shown = " ".join(ok(tmp_path, "send", "--help").split())
    for kind in KINDS:
        assert f"{kind.name}: messages up to" in shown and f"{kind.limits.max_batch} a receive" in shown, shown
