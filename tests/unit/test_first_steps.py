"""A newcomer's first commands: ``worker init`` makes a folder that ``worker run --burst`` runs at once, a first app
that names ``AzureWebJobsStorage`` without setting it is told what to do, and ``worker completion`` completes in bash.

Each runs the ``worker`` command as a real process, as a user's shell would.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.host.processes import worker_environment
from worker.ops import scaffold

pytestmark = pytest.mark.subprocess


def worker(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=folder,
        env=worker_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_init_makes_a_folder_that_send_and_run_burst_use_at_once(tmp_path: Path) -> None:
    made = worker(tmp_path, "init", "app")
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "app"
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "function_app.py", "host.json", "local.settings.json"]
    assert "worker send hello world && worker run --burst" in made.stdout

    sent = worker(folder, "send", scaffold.QUEUE, "world")
    assert sent.returncode == 0, sent.stderr
    ran = worker(folder, "run", "--burst")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    assert {"event": "hello, world"}.items() <= next(line for line in lines if line["event"].startswith("hello")).items()
    assert any(
        line["event"] == "queue storage opened" and str(folder / ".worker" / "queues.sqlite3") in line["storage"]
        for line in lines
    )
    assert ".worker/" in (folder / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_init_overwrites_nothing(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text("{}", encoding="utf-8")

    made = worker(tmp_path, "init")

    assert made.returncode == 2
    assert "already has host.json; worker init overwrites nothing" in made.stderr
    assert not (tmp_path / "function_app.py").exists()


def test_a_first_app_naming_an_unset_azurewebjobsstorage_is_told_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text(
        "from worker import WorkerApp\napp = WorkerApp()\n"
        "@app.queue_trigger(arg_name='msg', queue_name='images', connection='AzureWebJobsStorage')\n"
        "def resize(msg) -> None: ...\n",
        encoding="utf-8",
    )

    ran = worker(tmp_path, "run", "--burst")

    assert ran.returncode == 2
    assert "set AzureWebJobsStorage=sqlite:///.worker/queues.sqlite3" in ran.stderr
    assert "leave connection= out of the trigger" in ran.stderr


def completions(script: Path, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last is the word being completed), with ``script`` sourced."""
    words_array = " ".join(f"'{word}'" for word in words)
    program = (
        f"source {script}; COMP_WORDS=({words_array}); COMP_CWORD={len(words) - 1}; "
        "_worker_complete; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_come_from_the_parser_and_register_for_worker(tmp_path: Path, shell: str) -> None:
    written = worker(tmp_path, "completion", shell)
    assert written.returncode == 0, written.stderr
    script = tmp_path / f"worker.{shell}"
    script.write_text(written.stdout, encoding="utf-8")
    if shell == "zsh":
        assert written.stdout.splitlines()[2] == "autoload -U +X bashcompinit && bashcompinit"
        return

    registered = subprocess.run(
        ["bash", "-c", f"source {script} && complete -p worker"], capture_output=True, text=True, timeout=30
    )
    assert registered.stdout.strip() == "complete -o default -F _worker_complete worker", registered.stderr
    assert {"run", "send", "init", "completion", "spark"} <= set(completions(script, "worker", ""))
    assert completions(script, "worker", "spark", "st") == ["start-cluster", "start-connect", "status", "stop"]
    assert completions(script, "worker", "run", "--log-level", "") == ["DEBUG", "INFO", "WARNING", "ERROR"]
    assert completions(script, "worker", "poison", "re") == ["requeue"]
    assert "--burst" in completions(script, "worker", "run", "--b")
    assert completions(script, "worker", "spark", "stop", "--t") == ["--timeout"]


def test_a_hello_app_neither_lists_nor_imports_spark(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    app = folder / "function_app.py"
    app.write_text(
        app.read_text(encoding="utf-8").replace(
            '    logging.info("hello, %s", msg.get_body().decode())',
            "    import sys\n"
            '    spark = {"pyspark", "worker.spark", "worker.middleware.spark"}\n'
            '    open("seen.json", "w").write(__import__("json").dumps(sorted(spark & set(sys.modules))))',
        ),
        encoding="utf-8",
    )
    assert worker(folder, "send", scaffold.QUEUE, "world").returncode == 0

    ran = worker(folder, "run", "--burst")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    started = next(line for line in lines if line["event"] == "host started")
    assert "Counting" in started["middleware"] and "Spark" not in started["middleware"]
    assert json.loads((folder / "seen.json").read_text(encoding="utf-8")) == []  # neither pyspark nor Spark's modules


def test_an_app_that_imports_worker_spark_still_gets_the_spark_middleware(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    app = folder / "function_app.py"
    app.write_text(
        app.read_text(encoding="utf-8").replace("import logging\n", "import logging\nfrom worker import spark\n"),
        encoding="utf-8",
    )

    ran = worker(folder, "run", "--burst")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    assert "Spark" in next(line for line in lines if line["event"] == "host started")["middleware"]


def test_run_help_says_how_to_serve_the_console(tmp_path: Path) -> None:
    shown = worker(tmp_path, "run", "--help")

    assert shown.returncode == 0, shown.stderr
    assert "--http-port N" in shown.stdout and "serve the web console" in shown.stdout
    assert "worker run --http-port 8080 --http-host 127.0.0.1" in " ".join(shown.stdout.split())


def test_run_http_port_serves_the_console_and_its_start_line_says_where_and_how_to_get_in(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    setting, flag = ports

    ran = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--burst", "--http-port", str(flag), "--http-host", "127.0.0.1"],
        cwd=folder,
        env=worker_environment(WORKER__worker__httpPort=str(setting)),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    console = next(line for line in lines if line["event"] == "web console")
    assert console["url"] == f"http://127.0.0.1:{flag}/"  # the flag wins over worker.httpPort
    assert "loopback" in console["access"]
    assert next(line for line in lines if line["event"] == "endpoints listening")["port"] == flag


def test_with_several_processes_only_the_supervisors_console_is_announced(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    ran = worker(tmp_path / "app", "run", "--burst", "--processes", "2", "--http-port", str(port), "--http-host", "0.0.0.0")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    assert len([line for line in lines if line["event"] == "host started"]) == 2
    [console] = [line for line in lines if line["event"] == "web console"]
    assert console["url"] == f"http://localhost:{port}/"  # every interface: this machine's name to open it at
    assert "WORKER_HTTP_TOKEN" in console["access"]  # no token beyond loopback: it says what to set


def test_a_host_yaml_beside_host_json_is_warned_about_naming_the_one_read(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    (folder / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")

    ran = worker(folder, "run", "--burst")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    warned = next(line for line in lines if "is not read" in line["event"])
    assert warned["level"] == "warning"
    assert warned["read"] == str(folder / "host.yaml") and warned["not_read"] == str(folder / "host.json")
    assert warned["event"].startswith("host.json beside host.yaml is not read: host.yaml wins")


def test_poison_list_shows_why_a_message_failed_and_after_how_many_attempts(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    app = folder / "function_app.py"
    app.write_text(
        app.read_text(encoding="utf-8").replace(
            '    logging.info("hello, %s", msg.get_body().decode())',
            '    raise ValueError(f"no greeting for {msg.get_body().decode()}")',
        ),
        encoding="utf-8",
    )
    (folder / "host.json").write_text(
        json.dumps(
            {
                "version": "2.0",
                "extensions": {
                    "queues": {"maxDequeueCount": 2, "visibilityTimeout": "00:00:00", "maxPollingInterval": "00:00:00.200"}
                },
            }
        ),
        encoding="utf-8",
    )
    assert worker(folder, "send", scaffold.QUEUE, "world").returncode == 0
    assert worker(folder, "run", "--burst").returncode == 0

    listed = worker(folder, "poison", "list", scaffold.QUEUE)
    as_json = worker(folder, "poison", "list", scaffold.QUEUE, "--json")

    assert listed.returncode == 0, listed.stderr
    assert "attempts=2" in listed.stdout
    assert "last failure: ValueError: no greeting for world" in listed.stdout
    [row] = json.loads(as_json.stdout)
    assert row["attempts"] == 2 and row["lastFailure"].startswith("ValueError: no greeting for world")

    assert worker(folder, "poison", "requeue", scaffold.QUEUE).returncode == 0
    [back] = json.loads(worker(folder, "peek", scaffold.QUEUE, "--json").stdout)
    assert back["body"] == "world"
    with closing(sqlite3.connect(folder / ".worker" / "queues.sqlite3")) as db:  # the requeued message's properties
        assert db.execute("SELECT properties FROM messages WHERE queue = ?", (scaffold.QUEUE,)).fetchall() == [(None,)]


def test_run_burst_warns_of_messages_on_queues_no_function_reads(tmp_path: Path) -> None:
    assert worker(tmp_path, "init", "app").returncode == 0
    folder = tmp_path / "app"
    for queue, body in (
        ("helo", "world"),
        ("helo", "again"),
        (scaffold.QUEUE, "world"),
        ("other", "x"),
        (f"{scaffold.QUEUE}-poison", "old"),
    ):  # a poison queue is meant to hold messages: not named
        assert worker(folder, "send", queue, body).returncode == 0

    ran = worker(folder, "run", "--burst")

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    [warned] = [line for line in lines if line["event"].startswith("messages wait on queues no function")]
    assert warned["level"] == "warning"
    assert warned["queues"] == {"helo": 2, "other": 1} and warned["functions_read"] == [scaffold.QUEUE]


def test_help_lists_init_first_and_says_where_the_docs_are(tmp_path: Path) -> None:
    shown = worker(tmp_path, "--help")

    assert shown.returncode == 0, shown.stderr
    commands = [
        line.split()[0]
        for line in shown.stdout.split("COMMAND\n")[1].split("\n\n")[0].splitlines()
        if line.startswith("    ") and not line.startswith("      ")
    ]
    assert commands[:2] == ["init", "run"]
    epilog = " ".join(shown.stdout.split())
    assert "worker init hello && cd hello && worker send hello world && worker run --burst" in epilog
    assert "docs/ folder" in epilog and "make docs" in epilog
