"""host.json (or host.yaml) is read from where Functions keeps it: beside the app, found without --config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.ops.locate import find_config

REPO = Path(__file__).resolve().parents[2]

APP = """
import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="jobs", connection="AzureWebJobsStorage")
def always_fails(msg: str) -> None:
    raise RuntimeError(f"cannot do {msg}")
"""

HOST_JSON = {
    "version": "2.0",
    "logging": {"logLevel": {"default": "Information"}},
    "extensionBundle": {"id": "Microsoft.Azure.Functions.ExtensionBundle", "version": "[4.*, 5.0.0)"},
    "extensions": {"queues": {"maxDequeueCount": 1, "maxPollingInterval": "00:00:00.2"}},
}


def _worker(cwd: Path, app_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(app_dir), str(REPO)]),
            "AzureWebJobsStorage": f"sqlite:///{app_dir / 'queues.db'}",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "worker", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.subprocess
def test_host_json_beside_the_app_is_read_and_named(tmp_path: Path) -> None:
    app_dir, elsewhere = tmp_path / "app", tmp_path / "elsewhere"
    app_dir.mkdir()
    elsewhere.mkdir()
    (app_dir / "function_app.py").write_text(APP, encoding="utf-8")
    (app_dir / "host.json").write_text(json.dumps(HOST_JSON, indent="\t"), encoding="utf-8")  # as some editors save it
    sent = _worker(elsewhere, app_dir, "send", "jobs", "the work", "--config", str(app_dir / "host.json"))
    assert sent.returncode == 0, sent.stderr

    result = _worker(elsewhere, app_dir, "run", "--burst", "--app", "function_app:app")

    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [read] = [line for line in lines if line["event"] == "config file"]
    assert read["path"] == str(app_dir / "host.json")
    # extensionBundle, which every Functions app carries, is not warned about; logging.logLevel is honoured.
    assert not [line for line in lines if line["level"] == "warning"], lines
    # maxDequeueCount 1 from host.json: the one failure poisons the message.
    assert [line["dequeue_count"] for line in lines if line["event"] == "message moved to the poison queue"] == [1]


def test_host_yaml_wins_over_host_json_and_the_app_folder_over_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_dir = tmp_path / "pkg"
    app_dir.mkdir()
    (app_dir / "__init__.py").write_text("", encoding="utf-8")
    (app_dir / "function_app.py").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert find_config("pkg.function_app:app") is None

    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    assert find_config("pkg.function_app:app") == tmp_path / "host.yaml"
    (app_dir / "host.json").write_text("{}", encoding="utf-8")
    assert find_config("pkg.function_app:app") == app_dir / "host.json"
    (app_dir / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    assert find_config("pkg.function_app:app") == app_dir / "host.yaml"
    assert find_config("pkg:app") == app_dir / "host.yaml"  # a package's own folder
