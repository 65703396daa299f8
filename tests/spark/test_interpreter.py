"""Spark's Python workers run the worker's own interpreter: a Python function of the app works from .venv/bin/worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.spark import jvm
from tests.spark.sessions import process_env

REPO = Path(__file__).resolve().parents[2]


def _spark_section(where: str, request: pytest.FixtureRequest) -> dict[str, object]:
    conf: dict[str, object] = {"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2}
    if where == "local":
        return {"master": "local[2]", "conf": conf}
    if where == "connect":  # the server runs the Python functions, with the interpreter it was started with
        return {"master": request.getfixturevalue("spark_connect").url, "conf": {"spark.sql.shuffle.partitions": 2}}
    cluster = request.getfixturevalue("spark_cluster")
    request.getfixturevalue("spark_sessions").leave(cluster.url)  # the worker process's application needs the cores
    # Executors start in their own work folder: the app's package reaches them as it would on a real cluster,
    # through the executors' environment (or spark.submit.pyFiles / spark.archives).
    # The executors' JVM options are the suite's (tests/spark/jvm.py), which the cluster's worker gives only what the
    # application asks for.
    conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                 "spark.executor.memory": "512m", "spark.cores.max": 2, "spark.executorEnv.PYTHONPATH": str(REPO),
                 "spark.executor.extraJavaOptions": jvm.options()})
    return {"master": cluster.url, "conf": conf}


@pytest.mark.subprocess
@pytest.mark.parametrize("where", ["local", "cluster", "connect"])
def test_a_job_mapping_a_function_of_the_app_completes_without_the_venv_on_path(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """``python3`` on PATH here is the system's, without the worker's packages: the workers must not use it."""
    entry = Path(sys.executable).parent / "worker"
    assert entry.is_file(), entry
    (tmp_path / "host.yaml").write_text(yaml.safe_dump({
        "version": "1.0",
        "extensions": {"queues": {"maxPollingInterval": "200ms", "maxDequeueCount": 1}},
        "connections": {"AzureWebJobsStorage": "sqlite:///queues.db"},
        "spark": _spark_section(where, request),
    }), encoding="utf-8")
    result_file = tmp_path / "result.json"
    env = {k: v for k, v in process_env().items()
           if not k.startswith(("AzureWebJobs", "PYSPARK_", "VIRTUAL_ENV")) and k != "PYTHONPATH"}
    env.update({"PATH": "/usr/bin:/bin", "RESULT_FILE": str(result_file)})
    config = str(tmp_path / "host.yaml")

    sent = subprocess.run([str(entry), "send", "spark-udf", "100", "--config", config], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert sent.returncode == 0, sent.stderr
    run = subprocess.run([str(entry), "run", "--burst", "--app", "tests.apps.spark_udf:app", "--config", config],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)

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
        assert any(line["event"] == "Spark's Python workers use this interpreter" and line["python"] == sys.executable
                   for line in lines)
    master = yaml.safe_load((tmp_path / "host.yaml").read_text())["spark"]["master"]
    assert any(line["event"] == "starting Spark" and line["master"] == master for line in lines)
