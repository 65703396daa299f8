"""``make run``'s demo on Spark servers that ``worker spark`` starts and stops, as a data engineer tries a cluster.

Each test is what a person types: ``worker spark start-cluster`` (or
``start-connect``), the demo with ``--master`` set to the URL it printed, then
``worker spark stop``; all real processes, in a project folder holding the
sample's host.yaml.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.host.processes import REPO
from tests.spark import jvm
from tests.spark.sessions import process_env

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(420)]


def worker(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=project,
        env=process_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def demo(project: Path, master: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The demo on a small data set: two files, one of them CSV and one JSON lines, and the missing one."""
    return subprocess.run(
        [sys.executable, "-m", "functions.demo", "--master", master, "--size-mb", "0.1", "--files", "2"],
        cwd=project,
        env=process_env(PYTHONPATH=str(REPO), **env),
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder as the repository's root is to ``make run``: the sample's own host.yaml, and nothing else."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(REPO / "host.yaml", folder / "host.yaml")
    return folder


def refuses_connections(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def log_lines(project: Path) -> list[dict[str, object]]:
    text = (project / ".worker" / "pipeline" / "worker.log").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_the_demo_runs_on_a_standalone_cluster_started_and_stopped_by_worker_spark(project: Path) -> None:
    started = worker(project, "spark", "start-cluster", "--cores", "2", "--memory", "1g")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    state = project / ".worker" / "spark"
    try:
        assert re.fullmatch(r"spark://127\.0\.0\.1:\d+", url), started.stdout
        status = worker(project, "spark", "status")
        assert [line.split()[:2] for line in status.stdout.splitlines()] == [["master", url], ["worker", url]]

        # Its executors run with the suite's JVM options, as every JVM of the suite does (tests/spark/jvm.py): the
        # cluster's worker starts them with what the application asks for, set here as a user would, in the
        # environment (its driver and the servers have them from SPARK_SUBMIT_OPTS and SPARK_DAEMON_JAVA_OPTS).
        ran = demo(project, url, **{"WORKER__spark__conf__spark.executor.extraJavaOptions": jvm.options()})
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
        assert f"Spark on {url}" in ran.stdout
        assert "the generator put in" in ran.stdout and ": match" in ran.stdout
        # The steps ran on the cluster's executors, in the worker's work folder, not in a local driver.
        assert list((state / "work").glob("app-*/*/stderr")), "no executor ran on the cluster's worker"
    finally:
        stopped = worker(project, "spark", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert [line.split()[:3] for line in stopped.stdout.splitlines()] == [
        ["stopped", "the", "worker"],
        ["stopped", "the", "master"],
    ]
    assert refuses_connections(url)
    assert worker(project, "spark", "status").stdout.startswith("no Spark servers started from")


def test_the_demo_runs_on_a_connect_server_started_and_stopped_by_worker_spark(project: Path) -> None:
    """Also: host.yaml's ``spark.ui.enabled``, a setting the server keeps, is named once, not refused every run."""
    started = worker(project, "spark", "start-connect", "--master", "local[2]")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    try:
        assert re.fullmatch(r"sc://127\.0\.0\.1:\d+", url), started.stdout

        ran = demo(project, url)
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
        assert f"Spark on {url}" in ran.stdout and ": match" in ran.stdout
    finally:
        stopped = worker(project, "spark", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("stopped the connect")
    assert refuses_connections(url)

    lines = log_lines(project)
    assert any(line["event"] == "starting Spark" and line["master"] == url for line in lines)
    assert not [line for line in lines if "CANNOT_MODIFY" in json.dumps(line)]
    [left] = [line for line in lines if str(line["event"]).startswith("Spark settings left to the Connect server")]
    assert left["keys"] == ["spark.ui.enabled"]
