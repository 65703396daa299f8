"""host.json's ``logging.logLevel``: Functions' categories and level names applied to the host's and handlers' lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli
from tests.host.processes import worker_environment
from worker.observability.logs import Categories
from worker.settings.config import ConfigError, load_config

APP = """
import logging

import structlog

from worker import WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="chatty-jobs")
def chatty(msg) -> None:
    logging.getLogger("orders").info("chatty info", extra={"order_id": 7})
    logging.getLogger("orders").debug("chatty debug")
    structlog.get_logger().debug("chatty structlog debug")


@app.queue_trigger(arg_name="msg", queue_name="quiet-jobs")
def quiet(msg) -> None:
    logging.getLogger("orders").info("quiet info")
    logging.getLogger("orders").warning("quiet warning")
"""


def events(folder: Path, host_json: dict[str, Any], *args: str) -> list[dict[str, Any]]:
    """Send one message to each function and run the app once (burst) in a process of its own, whose logging is
    set up before any logger is used, as in every ``worker run``; the JSON lines it logged."""
    (folder / "host.json").write_text(json.dumps(host_json), encoding="utf-8")
    for queue in ("chatty-jobs", "quiet-jobs"):
        assert run_cli(folder, "send", queue, "x").returncode == 0
    ran = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--burst", "--app", "levels_app:app", *args],
        cwd=folder,
        env=worker_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    return [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "levels_app.py").write_text(APP, encoding="utf-8")
    return tmp_path


@pytest.mark.subprocess
def test_each_category_gets_its_own_level(folder: Path) -> None:
    lines = events(
        folder,
        {
            "version": "2.0",
            "logging": {
                "logLevel": {
                    "default": "Information",
                    "Function.quiet": "Warning",  # the host's lines about quiet, and (as a prefix) quiet's own
                    "Function.chatty.User": "Debug",  # chatty's own lines, down to debug
                }
            },
        },
    )
    said = {(line.get("function"), line["event"]) for line in lines}
    assert ("chatty", "Executing") in said and ("chatty", "Executed") in said
    assert {("chatty", "chatty info"), ("chatty", "chatty debug"), ("chatty", "chatty structlog debug")} <= said
    assert ("quiet", "quiet warning") in said
    assert [line.get("order_id") for line in lines if line["event"] == "chatty info"] == [7]  # logging's extra=
    assert not {("quiet", "Executing"), ("quiet", "Executed"), ("quiet", "quiet info")} & said
    assert any(line["event"] == "host started" for line in lines)  # Host.General: default, Information


@pytest.mark.subprocess
def test_host_none_silences_the_host_but_its_ready_line_and_log_level_overrides_every_category(folder: Path) -> None:
    lines = events(folder, {"version": "2.0", "logging": {"logLevel": {"Host": "None", "Function": "Warning"}}})
    assert [line["event"] for line in lines if not line.get("function")] == ["host started"]  # always said, once
    assert {line["event"] for line in lines if line.get("function")} == {"quiet warning"}

    lines = events(folder, {"version": "2.0", "logging": {"logLevel": {"default": "None"}}}, "--log-level", "INFO")
    assert any(line["event"] == "host started" for line in lines)
    assert any(line["event"] == "chatty info" for line in lines)


def test_the_most_specific_category_wins_in_any_case() -> None:
    categories = Categories({"default": "Error", "function": "Warning", "Function.Resize": "Debug", "azure": "None"})
    assert categories.level("Function.resize.User") == 10  # Function.Resize, the longest prefix
    assert categories.level("Function.other") == 30
    assert categories.level("Host.General") == 40  # default
    assert categories.level("azure.core.pipeline") == 60  # None: nothing
    assert categories.level("functions") == 40  # "function" is a prefix only at a dot


def test_an_unknown_level_name_is_refused_with_the_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text('{\n  "logging": {\n    "logLevel": { "Function": "Verbose" }\n  }\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert f"{path}:3" in str(caught.value) and "logging.logLevel" in str(caught.value)
    assert "Verbose" in str(caught.value) and "Information" in str(caught.value)


@pytest.mark.subprocess
def test_microsofts_monitoring_block_runs_with_trace_as_the_hosts_most_verbose_level(folder: Path) -> None:
    # The logLevel block of Microsoft's "Configure monitoring" page, as public host.json files copy it.
    lines = events(
        folder,
        {
            "version": "2.0",
            "logging": {
                "logLevel": {
                    "default": "Information",
                    "Host.Results": "Error",
                    "Function": "Error",
                    "Host.Aggregator": "Trace",
                    "Function.chatty.User": "Trace",
                }
            },
        },
    )
    said = {(line.get("function"), line["event"]) for line in lines}
    assert {("chatty", "chatty debug"), ("chatty", "chatty structlog debug")} <= said  # Trace: down to DEBUG
    assert ("quiet", "quiet info") not in said and ("quiet", "quiet warning") not in said  # Function: Error
    assert any(line["event"] == "host started" for line in lines)


@pytest.mark.subprocess
def test_default_none_silences_every_line_but_the_ready_one(folder: Path) -> None:
    lines = events(folder, {"version": "2.0", "logging": {"logLevel": {"default": "None"}}})
    assert [line["event"] for line in lines] == ["host started"]


def test_trace_is_debug_and_none_is_above_every_level() -> None:
    categories = Categories({"default": "None", "Host.Aggregator": "Trace"})
    assert categories.level("Host.Aggregator") == 10
    assert categories.level("Function.f.User") > 50
