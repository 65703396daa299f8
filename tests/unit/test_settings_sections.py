"""Settings sections owned by their readers: the loader keeps ``spark:`` as given (file and environment, with where each
value came from), Spark's middleware declares, reads and checks it, and the host refuses at start a wrong value
(listed with the other start problems, in the words the host's own settings are refused in) and a section that
nothing declares, by its name."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from worker import Middleware, QueueMessage, WorkerApp
from worker.middleware.spark_settings import from_config
from worker.model import StartupRefused
from worker.ops import preflight
from worker.runtime.host import Host
from worker.settings.config import HostConfig, load_config
from worker.settings.schema import Setting, parse_text
from worker.settings.sections import SectionSchema


def app_with(*middleware: Middleware) -> WorkerApp:
    app = WorkerApp()
    for one in middleware:
        app.add_middleware(one)

    @app.queue_trigger(arg_name="msg", queue_name="work")
    def work(msg: QueueMessage) -> None:
        """Runs nothing: the tests only start the host's checks."""

    return app


def test_the_host_settings_name_no_spark_and_spark_reads_its_section_from_the_file_and_the_environment(
    tmp_path: Path,
) -> None:
    assert not [item.name for item in fields(HostConfig) if "spark" in item.name]
    path = tmp_path / "host.yaml"
    path.write_text(
        "spark:\n  master: local[2]\n  conf:\n    spark.sql.shuffle.partitions: 4\n"
        "    spark.ui.enabled: false\n  startTimeout: 2m\n",
        encoding="utf-8",
    )
    config = load_config(
        path, environ={"WORKER__spark__master": "sc://connect:15002", "WORKER__spark__conf__spark.executor.memory": "2g"}
    )
    spark = from_config(config)
    assert spark.master == "sc://connect:15002"  # the environment wins, as for every setting
    assert spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", "spark.executor.memory": "2g"}
    assert (spark.start_timeout, spark.check_timeout, spark.app_name) == (120.0, 30.0, "queueworker")
    assert spark.log_file == tmp_path / ".worker" / "spark.log"
    assert config.sections["spark"].where("master") == "environment WORKER__spark__master"
    assert config.sections["spark"].where("startTimeout") == f"{path}:6"
    assert from_config(HostConfig(base_dir=tmp_path)).master == "local[*]"
    assert preflight.problems(app_with(), config, environ={}) == []


def test_a_wrong_spark_setting_and_a_section_nothing_reads_are_refused_at_start_with_the_other_problems(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host.yaml"
    path.write_text(
        "worker:\n  middleware: [nowhere:Missing]\n"
        "spark:\n  master: yarnn\n  conf: [a, b]\n  startTimeout: 0s\n  webUi: localhost:4040\n"
        "  mastr: local[1]\n"
        "Spark:\n  master: local[1]\n",
        encoding="utf-8",
    )
    config = load_config(path, environ={"WORKER__spark__checkTimeout": "2h"})  # the loader leaves them to Spark
    found = preflight.problems(app_with(), config, environ={})
    assert found[0].startswith("worker.middleware 'nowhere:Missing': cannot be loaded")
    assert found[1:] == [
        f"{path}:9: Spark: unknown section; did you mean spark? (top-level keys read: connections, extensions, "
        "functionTimeout, functions, logging, retry, spark, version, worker)",
        f"{path}:4: spark.master: expected a Spark master (local[*], spark://host:port, sc://host:port, yarn, "
        "k8s://...), got 'yarnn'",
        f"{path}:5: spark.conf: expected a mapping of Spark properties to values, got ['a', 'b']",
        f"{path}:6: spark.startTimeout: must be between 1s and 1d, got 0s",
        f"{path}:7: spark.webUi: expected the web UI's address, as http://host:port, got 'localhost:4040'",
        f"{path}:8: spark.mastr: unknown key; did you mean spark.master? (known keys: spark.appName, "
        "spark.checkTimeout, spark.conf, spark.master, spark.startTimeout, spark.webUi)",
        "environment WORKER__spark__checkTimeout: spark.checkTimeout: must be between 1s and 1h, got 2h",
    ]
    with pytest.raises(StartupRefused) as refused:  # a host built in code refuses them too
        Host(app_with(), config)
    assert refused.value.problems == found


class Tenants(Middleware):
    """Declares a section of its own, as Spark's middleware declares ``spark:``."""

    settings_sections = (SectionSchema("tenants", {"default": Setting("default", parse_text)}, dict),)


def test_a_section_is_accepted_once_a_middleware_declares_it_and_checked_by_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "host.yaml"
    path.write_text("tenants:\n  default: 7\n", encoding="utf-8")
    config = load_config(path, environ={})
    assert preflight.problems(app_with(), config, environ={}) == [
        f"{path}:1: tenants: unknown section (top-level keys read: connections, extensions, functionTimeout, "
        "functions, logging, retry, spark, version, worker)"
    ]
    assert preflight.problems(app_with(Tenants()), config, environ={}) == [
        f"{path}:2: tenants.default: expected text, got 7"
    ]


def test_a_misspelt_host_section_is_still_refused_as_the_host_key_it_misspells(tmp_path: Path) -> None:
    """``extension:`` is the host's ``extensions:`` mistyped, not a section for something else: refused on load."""
    path = tmp_path / "host.yaml"
    path.write_text("extension:\n  queues:\n    batchSize: 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="did you mean extensions.queues.batchSize"):
        load_config(path, environ={})
