"""Spark's Python workers run the worker's own interpreter: a Python function of the app works from .venv/bin/worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.spark.sessions import master_and_conf, process_env

REPO = Path(__file__).resolve().parents[2]


def _spark_section(where: str, request: pytest.FixtureRequest) -> dict[str, object]:
    """host.yaml's spark section: the master and settings of the group's other tests on ``where``
    (tests/spark/sessions.py), for a worker process of its own. On the cluster, executors start in their own work
    folder: the app's package reaches them as it would on a real cluster, through the executors' environment."""
    master, conf = master_and_conf(where, request)
    if where == "cluster":  # the worker process's application needs the cores
        request.getfixturevalue("spark_sessions").leave(master)
    return {"master": master, "conf": conf}


@pytest.mark.subprocess
@pytest.mark.parametrize("where", ["local", "cluster", "connect"])
def test_a_job_mapping_a_function_of_the_app_completes_without_the_venv_on_path(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """``python3`` on PATH here is the system's, without the worker's packages: the workers must not use it."""
    entry = Path(sys.executable).parent / "worker"
    assert entry.is_file(), entry
    (tmp_path / "host.yaml").write_text(
        yaml.safe_dump(
            {
                "version": "1.0",
                "extensions": {"queues": {"maxPollingInterval": "200ms", "maxDequeueCount": 1}},
                "connections": {"AzureWebJobsStorage": "sqlite:///queues.db"},
                "spark": _spark_section(where, request),
            }
        ),
        encoding="utf-8",
    )
    result_file = tmp_path / "result.json"
    env = {
        k: v
        for k, v in process_env().items()
        if not k.startswith(("AzureWebJobs", "PYSPARK_", "VIRTUAL_ENV")) and k != "PYTHONPATH"
    }
    env.update({"PATH": "/usr/bin:/bin", "RESULT_FILE": str(result_file)})
    config = str(tmp_path / "host.yaml")

    sent = subprocess.run(
        [str(entry), "send", "spark-udf", "100", "--config", config],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    run = subprocess.run(
        [str(entry), "run", "--burst", "--app", "tests.apps.spark_udf:app", "--config", config],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert run.returncode == 0, run.stderr[-3000:]
    assert "ModuleNotFoundError" not in run.stderr
    squares = sum(i * i for i in range(100))
    expected = {"udf": squares} if where == "connect" else {"rdd": squares, "udf": squares}
    assert json.loads(result_file.read_text()) == expected, run.stderr[-3000:]
    not_json = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert not not_json, f"lines on the worker's stderr that are not its JSON log: {not_json[:5]}"
    assert "CANNOT_MODIFY_CONFIG" not in run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    if where != "connect":  # on Connect the server's interpreter runs them
        assert any(
            line["event"] == "Spark's Python workers use this interpreter" and line["python"] == sys.executable
            for line in lines
        )
    master = yaml.safe_load((tmp_path / "host.yaml").read_text())["spark"]["master"]
    assert any(line["event"] == "starting Spark" and line["master"] == master for line in lines)
