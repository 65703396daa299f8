"""What the console's start-up view is made of: the settings that differ from the defaults (secrets by name only),
and the functions of an app that are not run (other triggers, switched off)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from worker.compat.loading import load_app
from worker.settings.config import HostConfig, parse_duration
from worker.settings.retry import parse_retry
from worker.settings.sections import Section


def test_differences_name_the_changed_settings_and_keep_secrets_out() -> None:
    secret = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0"
    config = dataclasses.replace(
        HostConfig(),
        lease_duration=30.0,
        http_port=8080,
        connections={"Orders": secret},
        sections={
            "spark": Section("spark", {"master": "spark://cluster:7077", "conf": {"spark.hadoop.fs.s3a.secret.key": "hush"}})
        },
        retry=parse_retry({"strategy": "fixedDelay", "maxRetryCount": 3, "delayInterval": "00:00:05"}, parse_duration),
        base_dir=Path("/elsewhere"),
        source=Path("/elsewhere/host.yaml"),
    )
    found = config.differences()
    assert found["worker.leaseDuration"] == "30"
    assert found["worker.httpPort"] == "8080"
    assert found["connections"] == "Orders"
    assert found["spark.master"] == "spark://cluster:7077"
    assert found["spark.conf"] == "spark.hadoop.fs.s3a.secret.key"
    assert found["retry"] == "fixedDelay 5s"
    assert not any(secret in value or "hush" in value for value in found.values())
    assert "/elsewhere" not in " ".join(found.values())
    assert HostConfig().differences() == {}


def test_functions_not_run_are_kept_on_the_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "console_facts_app.py").write_text(
        "import azure.functions as func\n"
        "app = func.FunctionApp()\n"
        "@app.queue_trigger(arg_name='msg', queue_name='one', connection='AzureWebJobsStorage')\n"
        "def first(msg: func.QueueMessage) -> None: pass\n"
        "@app.function_name('Second')\n"
        "@app.queue_trigger(arg_name='msg', queue_name='two', connection='AzureWebJobsStorage')\n"
        "def second(msg: func.QueueMessage) -> None: pass\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("AzureWebJobs.Second.Disabled", "true")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "console_facts_app", raising=False)
    app = load_app("console_facts_app:app", tmp_path)
    assert [f.name for f in app.functions] == ["first"]
    assert app.not_run == ("function Second is disabled (AzureWebJobs.Second.Disabled)",)
