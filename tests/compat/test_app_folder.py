"""A Functions app folder as its users have it, run with ``worker run`` in that folder and no flags.

The folder holds only ``function_app.py``, ``host.json`` (with the comments
Functions' reader accepts) and ``local.settings.json``: the app is found as
Functions finds it, host.json is read beside it, and local.settings.json's
``Values`` become the process's settings unless the environment has them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.host.processes import worker_environment
from tests.support import poll

APP = """
import os
from pathlib import Path

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="orders", connection="AzureWebJobsStorage")
def record(msg: func.QueueMessage) -> None:
    # RESULTS comes from local.settings.json's Values, as the Functions host would set it.
    Path(os.environ["RESULTS"], msg.id).write_text(msg.get_body().decode(), encoding="utf-8")
"""

HOST_JSON = """{
  // As `func init` writes it, plus the queue settings; Functions' reader takes comments.
  "version": "2.0",
  "logging": { "logLevel": { "default": "Information" } },
  "extensions": {
    "queues": {
      "maxPollingInterval": "00:00:00.2", /* poll often: the test waits on it */
      "maxDequeueCount": 2,
    },
  },
}
"""


def app_folder(folder: Path, values: dict[str, str], **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "function_app.py").write_text(APP, encoding="utf-8")
    (folder / "host.json").write_text(HOST_JSON, encoding="utf-8")
    settings = {"IsEncrypted": False, "Values": {"FUNCTIONS_WORKER_RUNTIME": "python", **values}, **extra}
    (folder / "local.settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    return folder


def worker(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=folder,
        env=env or worker_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def log_lines(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.mark.subprocess
@pytest.mark.parametrize("backend_kind", ["sqlite", "azurite"])
def test_worker_run_with_no_flags_in_the_app_folder_reads_its_three_files(
    tmp_path: Path, backend_kind: str, request: pytest.FixtureRequest
) -> None:
    storage = (
        request.getfixturevalue("azurite").connection_string
        if backend_kind == "azurite"
        else (f"sqlite:///{tmp_path / 'queues.sqlite3'}")
    )
    results = tmp_path / "results"
    results.mkdir()
    folder = app_folder(tmp_path / "app", {"AzureWebJobsStorage": storage, "RESULTS": str(results)})

    sent = worker(folder, "send", "orders", "first order")  # local.settings.json names the storage for send too
    assert sent.returncode == 0, sent.stderr
    with (tmp_path / "worker.log").open("w") as log:
        run = subprocess.Popen(
            [sys.executable, "-m", "worker", "run"],
            cwd=folder,
            env=worker_environment(),
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
    try:
        # The handler's write_text creates the file before it writes it: wait for what it wrote, not the name.
        written = poll(
            lambda: [path.read_text(encoding="utf-8") for path in results.iterdir() if path.stat().st_size],
            60,
            what="the handler's file with its text",
        )
        assert written == ["first order"]
        run.send_signal(signal.SIGTERM)
        assert run.wait(60) == 0
    finally:
        run.kill()
    lines = log_lines((tmp_path / "worker.log").read_text(encoding="utf-8"))
    events = {line["event"]: line for line in lines}
    assert events["local settings read"]["path"] == str(folder / "local.settings.json")
    assert events["config file"]["path"] == str(folder / "host.json")
    assert events["function loaded"]["function"] == "record"


@pytest.mark.subprocess
def test_app_names_a_v2_folder_elsewhere_as_it_names_a_v1_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # A folder named as no module is, holding function_app.py: worker run --app FOLDER from another folder.
    folder = app_folder(
        tmp_path / "nickward", {"AzureWebJobsStorage": f"sqlite:///{tmp_path / 'queues.sqlite3'}", "RESULTS": str(results)}
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "function_app.py").write_text("raise RuntimeError('not this one')\n", encoding="utf-8")
    assert worker(folder, "send", "orders", "from afar").returncode == 0

    ran = worker(elsewhere, "run", "--burst", "--app", str(folder))
    assert ran.returncode == 0, ran.stderr
    assert [path.read_text(encoding="utf-8") for path in results.iterdir()] == ["from afar"]
    events = {line["event"]: line for line in log_lines(ran.stderr)}
    assert events["config file"]["path"] == str(folder / "host.json")  # its files read from its folder
    assert events["local settings read"]["path"] == str(folder / "local.settings.json")


@pytest.mark.subprocess
def test_a_setting_the_environment_already_has_is_skipped_and_named_without_its_value(tmp_path: Path) -> None:
    results, elsewhere = tmp_path / "results", tmp_path / "not-here"
    results.mkdir()
    folder = app_folder(
        tmp_path / "app", {"AzureWebJobsStorage": f"sqlite:///{tmp_path / 'q.sqlite3'}", "RESULTS": str(elsewhere)}
    )
    env = worker_environment(RESULTS=str(results))
    assert worker(folder, "send", "orders", "one", env=env).returncode == 0

    run = worker(folder, "run", "--burst", env=env)

    assert run.returncode == 0, run.stderr
    assert len(list(results.iterdir())) == 1 and not elsewhere.exists()  # the environment's RESULTS won
    [skipped] = [line for line in log_lines(run.stderr) if str(line["event"]).startswith("local settings skipped")]
    assert skipped["keys"] == ["RESULTS"]
    assert str(elsewhere) not in run.stderr


def test_encrypted_local_settings_are_refused(tmp_path: Path) -> None:
    folder = app_folder(tmp_path / "app", {"AzureWebJobsStorage": "c2VjcmV0"}, IsEncrypted=True)
    ran = run_cli(folder, "run")
    assert ran.returncode == 2
    assert f"{folder / 'local.settings.json'}: IsEncrypted is true" in ran.stderr
    assert "c2VjcmV0" not in ran.stderr


def test_local_settings_that_are_not_json_are_refused_with_line_and_column(tmp_path: Path) -> None:
    folder = app_folder(tmp_path / "app", {})
    # Comments and a trailing comma are what Core Tools accepts too; the missing comma after "a" is not.
    (folder / "local.settings.json").write_text(
        '{\n  // local only\n  "Values": {\n    "A": "a"\n    "B": "b",\n  },\n}\n', encoding="utf-8"
    )
    ran = run_cli(folder, "run")
    assert ran.returncode == 2
    assert f"{folder / 'local.settings.json'}: not valid JSON: " in ran.stderr
    assert "line 5" in ran.stderr and "column 5" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


def test_no_app_in_the_folder_names_what_was_looked_for(tmp_path: Path) -> None:
    ran = run_cli(tmp_path, "run")
    assert ran.returncode == 2
    assert f"no app to run: no function_app.py in {tmp_path}" in ran.stderr
    assert "PYTHON_SCRIPT_FILE_NAME" in ran.stderr and "--app" in ran.stderr


@pytest.mark.subprocess
def test_another_runtime_and_a_missing_connection_are_listed_together_with_where_settings_were_looked_for(
    tmp_path: Path,
) -> None:
    folder = app_folder(tmp_path / "app", {"FUNCTIONS_WORKER_RUNTIME": "dotnet-isolated"})

    run = worker(folder, "run")

    assert run.returncode == 2
    assert "2 problem(s)" in run.stderr
    assert "FUNCTIONS_WORKER_RUNTIME is 'dotnet-isolated': this host runs Python apps only" in run.stderr
    assert (
        "Storage account connection string 'AzureWebJobsStorage' does not exist. Make sure that it is a defined "
        f"App Setting. (looked in: the environment, {folder / 'local.settings.json'}, "
        f"{folder / 'host.json'} (connections:))"
    ) in run.stderr


@pytest.mark.subprocess
def test_python_script_file_name_names_the_entry_point_and_its_single_app_is_found(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "main.py").write_text(
        "from worker import WorkerApp\n\nworkers = WorkerApp()\n\n\n"
        "@workers.queue_trigger(arg_name='msg', queue_name='jobs')\nasync def job(msg) -> None:\n    pass\n",
        encoding="utf-8",
    )
    env = worker_environment(PYTHON_SCRIPT_FILE_NAME="main.py")
    assert worker(folder, "send", "jobs", "x", env=env).returncode == 0

    run = worker(folder, "run", "--burst", env=env)

    assert run.returncode == 0, run.stderr
    assert "job" in run.stdout  # the run summary's row of the one function


def test_every_decorator_used_wrongly_is_listed_at_start(tmp_path: Path) -> None:
    """Two mistakes in one app: both refused in one run (before, the import stopped at the first)."""
    (tmp_path / "function_app.py").write_text(
        textwrap.dedent("""
        from worker import Out, QueueMessage, WorkerApp

        app = WorkerApp()

        @app.queue_trigger(arg_name="msg", queue_name="orders")
        def wrong_parameter(message: QueueMessage) -> None:
            pass

        @app.queue_trigger(arg_name="msg", queue_name="resize")
        @app.blob_output(arg_name="out", path="no-container")
        def no_container(msg: QueueMessage, out: Out[str]) -> None:
            pass
    """),
        encoding="utf-8",
    )
    ran = run_cli(tmp_path, "run", "--no-supervisor", "--burst")
    assert ran.returncode == 2, ran.stderr
    assert "function wrong_parameter: queue_trigger: has no parameter 'msg' for the queue message" in ran.stderr
    assert "function no_container: blob_output 'out': blob path 'no-container' must look like" in ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.subprocess
def test_worker_send_from_a_subfolder_reaches_the_queue_file_worker_run_reads(tmp_path: Path) -> None:
    """Both commands find the app's host.json and local.settings.json, whose relative sqlite:/// path is taken from
    host.json's folder: one queue file."""
    results = tmp_path / "results"
    results.mkdir()
    folder = app_folder(tmp_path / "app", {"AzureWebJobsStorage": "sqlite:///queues/app.sqlite3", "RESULTS": str(results)})
    (folder / "scripts").mkdir()
    queue_file = folder / "queues" / "app.sqlite3"

    sent = worker(folder / "scripts", "send", "orders", "from a subfolder")

    assert sent.returncode == 0, sent.stderr
    assert sent.stderr == f"creating a new embedded queue file at {queue_file}\n"
    assert not (folder / "scripts" / "queues").exists()
    run = worker(folder, "run", "--burst")
    assert run.returncode == 0, run.stderr
    assert [path.read_text(encoding="utf-8") for path in results.iterdir()] == ["from a subfolder"]
    [opened] = [line for line in log_lines(run.stderr) if line["event"] == "queue storage opened"]
    assert opened["storage"] == f"embedded queue {queue_file}"
