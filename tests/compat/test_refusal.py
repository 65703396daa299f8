"""What cannot run is refused at start by ``worker run``, every problem on its own line; disabled functions step aside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

APP = """
import azure.functions as func

print("app module imported", flush=True)

app = func.FunctionApp()


@app.function_name("Thumbnails")
@app.queue_trigger(arg_name="msg", queue_name="images", connection="ImagesStorage")
@app.blob_output(arg_name="out", path="%THUMBS_CONTAINER%/{id}.png", connection="AzureWebJobsStorage")
def thumbnails(msg: func.QueueMessage, out: func.Out[bytes]) -> None:
    out.set(msg.get_body())


@app.function_name("Ledger")
@app.queue_trigger(arg_name="msg", queue_name="%LEDGER_QUEUE%", connection="AzureWebJobsStorage")
@app.table_output(arg_name="row", table_name="ledger", connection="AzureWebJobsStorage")
def ledger(msg: func.QueueMessage, row: func.Out[str]) -> None:
    row.set("{}")


@app.function_name("Audit")
@app.queue_trigger(arg_name="msg", queue_name="audit", connection="")
def audit(msg: str) -> None:
    print("audited", msg, flush=True)


@app.route(route="hello")
def hello(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("hi")
"""


def _run(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=folder,
        env={**base, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)]), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    (tmp_path / "function_app.py").write_text(APP, encoding="utf-8")
    (tmp_path / "host.yaml").write_text(
        'version: "1.0"\nextensions:\n  queues:\n    maxPollingInterval: 200ms\n', encoding="utf-8"
    )
    return tmp_path


@pytest.mark.subprocess
def test_every_problem_is_listed_at_once_with_exit_code_2(app_folder: Path) -> None:
    # Three processes: the first refuses the app, once; the others, started beside it, never load it.
    result = _run(app_folder, "run", "--app", "function_app:app", "--config", "host.yaml", "--processes", "3")

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    problems = [line.strip() for line in result.stderr.splitlines() if line.startswith("  function ")]
    # Functions' own message, then every place this host looked for the setting.
    looked_in = (
        f" (looked in: the environment, no local.settings.json in {app_folder}, {app_folder / 'host.yaml'} (connections:))"
    )
    missing_storage = (
        "Storage account connection string 'AzureWebJobsStorage' does not exist. Make sure that it is a "
        "defined App Setting." + looked_in
    )
    assert sorted(problems) == sorted(
        [
            f"function Ledger, trigger queueTrigger (msg): {missing_storage}",
            f"function Thumbnails, output binding blob (out): {missing_storage}",
            "function Ledger, output binding table (row): this host does not provide this binding type (it provides "
            "queue outputs and blob inputs and outputs)",
            "function Ledger, trigger queueTrigger (msg): the queue name '%LEDGER_QUEUE%' refers to the app setting "
            "LEDGER_QUEUE, which is not set",
            "function Thumbnails, trigger queueTrigger (msg): Storage account connection string 'AzureWebJobsImagesStorage' "
            "does not exist. Make sure that it is a defined App Setting." + looked_in,
            "function Thumbnails, output binding blob (out): the path '%THUMBS_CONTAINER%/{id}.png' refers to the app "
            "setting THUMBS_CONTAINER, which is not set",
            f"function Audit, trigger queueTrigger (msg): {missing_storage}",
        ]
    ), result.stderr
    assert result.stdout.count("app module imported") == 1, result.stdout


@pytest.mark.subprocess
def test_disabled_functions_step_aside_and_the_rest_run(app_folder: Path) -> None:
    env = {
        "AzureWebJobsStorage": "sqlite:///.worker/queues.sqlite3",
        "AzureWebJobs.Thumbnails.Disabled": "true",
        "AzureWebJobs.Ledger.Disabled": "True",
    }
    sent = _run(app_folder, "send", "audit", "first", "--config", "host.yaml", env=env)
    assert sent.returncode == 0, sent.stderr

    result = _run(app_folder, "run", "--burst", "--app", "function_app:app", "--config", "host.yaml", env=env)

    assert result.returncode == 0, result.stderr
    assert "audited first" in result.stdout
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [not_run] = [line for line in lines if line["event"].startswith("functions not run")]
    assert not_run["count"] == 3  # Thumbnails and Ledger (disabled) and hello (HTTP), in one line
    loaded = [line["function"] for line in lines if line["event"] == "function loaded"]
    assert loaded == ["Audit"]


@pytest.mark.subprocess
def test_a_v1_app_with_an_old_azure_functions_is_told_its_version_is_too_old(tmp_path: Path) -> None:
    # An azure-functions of before the decorators (1.11), installed ahead of the real one: what the conversion
    # imports from it is missing.
    old = tmp_path / "site"
    (old / "azure" / "functions").mkdir(parents=True)
    (old / "azure" / "functions" / "__init__.py").write_text("class QueueMessage: ...\n", encoding="utf-8")
    (old / "azure_functions-1.11.0.dist-info").mkdir()
    (old / "azure_functions-1.11.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: azure-functions\nVersion: 1.11.0\n", encoding="utf-8"
    )
    app = tmp_path / "app"
    (app / "Orders").mkdir(parents=True)
    (app / "Orders" / "function.json").write_text(
        json.dumps({"bindings": [{"type": "queueTrigger", "direction": "in", "name": "msg", "queueName": "orders"}]}),
        encoding="utf-8",
    )
    (app / "Orders" / "__init__.py").write_text("def main(msg):\n    pass\n", encoding="utf-8")
    (app / "host.json").write_text('{"version": "2.0"}', encoding="utf-8")

    ran = _run(
        app,
        "run",
        "--burst",
        env={
            "PYTHONPATH": os.pathsep.join([str(old), str(REPO)]),
            "AzureWebJobsStorage": f"sqlite:///{tmp_path / 'q.sqlite3'}",
        },
    )
    assert ran.returncode == 2, ran.stderr
    assert "azure-functions 1.11.0 is installed; this host needs 1.20 or later" in ran.stderr
    assert "needs azure-functions (" not in ran.stderr
