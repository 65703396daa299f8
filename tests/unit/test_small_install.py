"""A small install: ``pip install queueworker`` without the ``oci``, ``sqs`` or ``otel`` extras runs the embedded
queue and Azure Storage.

The OCI SDK is made missing here the way Python itself knows a missing module:
``sys.modules["oci"] = None`` makes ``import oci`` fail and ``find_spec`` answer
None. tests/deploy/test_wheel.py installs the built wheel into a fresh
virtualenv where the SDK is really absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.unit.test_structure import MODULES

REPO = Path(__file__).resolve().parents[2]
OCI_CONNECTION = "oci://cell-1.queue.messaging.us-ashburn-1.oci.oraclecloud.com?compartment=ocid1.compartment.oc1..x"
INSTALL = "pip install 'queueworker[oci]'"


@pytest.fixture
def no_oci_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OCI SDK is not installed, as far as this process can tell, for the test."""
    monkeypatch.setitem(sys.modules, "oci", None)


@pytest.mark.usefixtures("no_oci_sdk")
@pytest.mark.parametrize("command", [("send", "orders", "hello"), ("peek", "orders")], ids=["send", "peek"])
def test_a_queue_command_on_oci_without_the_sdk_says_how_to_install_it(tmp_path: Path, command: tuple[str, ...]) -> None:
    ran = run_cli(tmp_path, *command, env={"AzureWebJobsStorage": OCI_CONNECTION})

    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip() == (
        f"worker {command[0]}: error: connection AzureWebJobsStorage: OCI Queue needs the OCI "
        f"SDK, which is not installed: {INSTALL}"
    )


@pytest.mark.usefixtures("no_oci_sdk")
def test_worker_run_on_oci_without_the_sdk_is_refused_with_every_other_problem(tmp_path: Path) -> None:
    ran = run_cli(
        tmp_path,
        "run",
        "--no-supervisor",
        "--app",
        "tests.apps.recording:app",
        env={"AzureWebJobsStorage": OCI_CONNECTION, "FUNCTIONS_WORKER_RUNTIME": "node"},
    )

    assert ran.returncode == 2, ran.stderr
    assert "FUNCTIONS_WORKER_RUNTIME is 'node'" in ran.stderr
    assert (
        f"function recorder, trigger queueTrigger (msg): connection AzureWebJobsStorage: OCI Queue needs the OCI "
        f"SDK, which is not installed: {INSTALL}"
    ) in ran.stderr


def test_worker_version_is_the_packages(tmp_path: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    ran = run_cli(tmp_path, "--version")
    assert (ran.returncode, ran.stdout) == (0, f"worker {version}\n")


#: Each optional SDK, and the modules allowed to import it: only those an extra's connection or setting loads.
#: The registry reads OCI connection strings (``worker.backends.oci.connection``) without the SDK, so that module
#: counts as the core's; tracing's own modules are imported only when OTEL_* variables ask for traces.
EXTRAS = {
    "oci": lambda name: name.startswith("worker.backends.oci.") and name != "worker.backends.oci.connection",
    # SQS connection strings, FIFO ids and batching are read without botocore; the errors and the backend need it.
    "botocore": lambda name: (
        name in ("worker.backends.sqs.errors", "worker.backends.sqs.queues", "worker.backends.sqs.urls")
    ),
    "opentelemetry": lambda name: name in ("worker.observability.otel", "worker.middleware.tracing"),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("sdk", sorted(EXTRAS))
def test_no_module_of_the_core_imports_an_extras_sdk(sdk: str) -> None:
    """Every module but the extra's own, imported in a fresh interpreter, leaves the SDK unimported."""
    core = sorted(name for name in MODULES if name != "worker.__main__" and not EXTRAS[sdk](name))  # main runs
    script = (
        "import importlib, json, sys\n"
        f"for name in {core!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m == {sdk!r} or m.startswith({sdk + '.'!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    assert "worker.backends.registry" in core and "worker.ops.cli" in core and "worker.runtime.host" in core


def test_a_queue_command_on_sqs_without_botocore_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)
    ran = run_cli(tmp_path, "send", "orders", "hello", env={"AzureWebJobsStorage": "sqs://?region=us-east-1"})

    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip() == (
        "worker send: error: connection AzureWebJobsStorage: Amazon SQS needs botocore, "
        "which is not installed: pip install 'queueworker[sqs]'"
    )
