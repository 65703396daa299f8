"""Traces asked for by the OTEL_* variables: when they are on, and a start refused (never a silent run without them)
when the extra is missing or the variables ask for what this host does not ship."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.processes import REPO, worker_environment, write_host_yaml
from worker.observability.tracing import OTEL_INSTALL, problem, requested

ENDPOINT = "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("environ", "asking"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "orders"}, None),  # names the service, asks for nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "none"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_traces_are_on_only_when_a_variable_asks_for_them(environ: dict[str, str], asking: str | None) -> None:
    assert requested(environ) == asking


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTLP protocol 'grpc' is not shipped: this host exports OTLP as http/protobuf",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTLP protocol 'http/json' is not shipped: this host exports OTLP as http/protobuf",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin,otlp"},
            "OTEL_TRACES_EXPORTER names zipkin: this host exports traces with otlp, console, none",
        ),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None),  # no OTLP: no protocol
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, None),
    ],
)
def test_what_this_host_cannot_export_is_a_problem(environ: dict[str, str], line: str | None) -> None:
    assert problem(environ) == line


@pytest.fixture
def without_opentelemetry(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import opentelemetry, as where the extra is not installed: a
    sitecustomize on the path marks the package missing before anything runs."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text('import sys\nsys.modules["opentelemetry"] = None\n', encoding="utf-8")
    return {"PYTHONPATH": f"{folder}:{REPO}"}


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "command", [("run", "--app", "tests.apps.traced:app"), ("send", "orders", "hello")], ids=["run", "send"]
)
def test_traces_asked_for_without_the_extra_refuse_the_start_with_the_install_command(
    tmp_path: Path, without_opentelemetry: dict[str, str], command: tuple[str, ...]
) -> None:
    config = write_host_yaml(tmp_path)
    env = worker_environment(OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT, **without_opentelemetry)
    ran = subprocess.run(
        [sys.executable, "-m", "worker", *command, "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert ran.returncode == 2, ran.stderr
    line = (
        f"OTEL_EXPORTER_OTLP_ENDPOINT asks for OpenTelemetry traces, but the OpenTelemetry SDK and OTLP/HTTP "
        f"exporter are not installed: {OTEL_INSTALL}"
    )
    assert line in ran.stderr
    assert not (tmp_path / ".worker").exists()  # refused before any queue was opened or made


@pytest.mark.subprocess
def test_without_the_extra_and_without_asking_the_host_runs(tmp_path: Path, without_opentelemetry: dict[str, str]) -> None:
    """The other side of the refusal: the same missing package, no OTEL_* asking (one says it is disabled)."""
    config = write_host_yaml(tmp_path)
    env = worker_environment(
        OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT,
        OTEL_SDK_DISABLED="true",
        TRACE_PARENTS=str(tmp_path / "trace-parents.txt"),
        **without_opentelemetry,
    )
    sent = subprocess.run(
        [sys.executable, "-m", "worker", "send", "orders", "hello", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    ran = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--app", "tests.apps.traced:app", "--burst", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (sent.returncode, ran.returncode) == (0, 0), sent.stderr + ran.stderr
    rows = {line.split()[0]: line.split()[1:] for line in ran.stdout.splitlines()[1:3]}
    assert rows == {"forward": ["1", "1"], "ship": ["1", "1"]}, ran.stdout  # received, succeeded
