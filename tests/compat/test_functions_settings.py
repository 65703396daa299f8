"""Functions' app settings an app moved here carries: host.json overrides, process and thread counts, the rest named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

APP = """
import os

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="jobs", connection="AzureWebJobsStorage")
def always_fails(msg: str) -> None:
    raise RuntimeError(f"cannot do {msg}")


@app.queue_trigger(arg_name="msg", queue_name="counted", connection="AzureWebJobsStorage")
def counted(msg: str) -> None:
    pass
"""

HOST_JSON = {
    "version": "2.0",
    "extensions": {"queues": {"maxDequeueCount": 5, "maxPollingInterval": "00:00:00.2"}},
}


def _worker(app_dir: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WORKER__", "AzureWebJobs", "AzureFunctionsJobHost", "FUNCTIONS_", "PYTHON_"))
    }
    env.update({"PYTHONPATH": str(REPO), "AzureWebJobsStorage": f"sqlite:///{app_dir / 'queues.db'}", **settings})
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lines(ran: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "function_app.py").write_text(APP, encoding="utf-8")
    (tmp_path / "host.json").write_text(json.dumps(HOST_JSON), encoding="utf-8")
    return tmp_path


@pytest.mark.subprocess
def test_an_azure_functions_job_host_setting_overrides_host_json(app_dir: Path) -> None:
    assert _worker(app_dir, "send", "jobs", "the work").returncode == 0
    ran = _worker(app_dir, "run", "--burst", AzureFunctionsJobHost__extensions__queues__maxDequeueCount="1")
    assert ran.returncode == 0, ran.stderr
    lines = _lines(ran)
    # host.json says 5 attempts; the app setting says 1: the one failure poisons the message.
    assert [line["dequeue_count"] for line in lines if line["event"] == "message moved to the poison queue"] == [1]
    assert len([line for line in lines if line["event"] == "Executing"]) == 1


@pytest.mark.subprocess
def test_process_count_comes_from_functions_and_unused_settings_are_named_once(app_dir: Path) -> None:
    for number in range(4):
        assert _worker(app_dir, "send", "counted", str(number)).returncode == 0
    ran = _worker(
        app_dir,
        "run",
        "--burst",
        FUNCTIONS_WORKER_PROCESS_COUNT="2",
        PYTHON_THREADPOOL_THREAD_COUNT="3",
        APPLICATIONINSIGHTS_CONNECTION_STRING="InstrumentationKey=0",
        FUNCTIONS_EXTENSION_VERSION="~4",
    )
    assert ran.returncode == 0, ran.stderr
    lines = _lines(ran)
    started = [line for line in lines if line["event"] == "host started"]
    assert len(started) == 2 and len({line["pid"] for line in lines if line["event"] == "host started"}) == 2, started
    [unused] = [line for line in lines if line["event"] == "Functions app settings not used by this host"]
    assert unused["settings"] == ["APPLICATIONINSIGHTS_CONNECTION_STRING", "FUNCTIONS_EXTENSION_VERSION"]
    assert "InstrumentationKey" not in ran.stderr  # named, never shown
