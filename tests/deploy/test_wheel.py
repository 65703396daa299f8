"""``pip install queueworker``: the wheel built from this tree, installed into a fresh virtualenv, runs an app.

Without extras the install has the embedded queue and Azure Storage, and no OCI SDK: the installed ``worker``
command sends to and runs an app on the embedded queue, says its version, and refuses an ``oci://`` connection
with the command that installs the SDK. With ``[oci]`` the same command sends to the OCI Queue test server.

How it installs, and why so: the wheel is built by ``pip wheel --no-deps`` from a copy of what the package is
made of (nothing is written into the tree), with the build backend pyproject.toml names fetched by pip into an
isolated build environment; the virtualenv is made by ``python -m venv`` without pip of its own, and this
interpreter's pip installs into it (``--python``), from the package index pip is configured with, pinned by
constraints.txt: what ``pip install queueworker`` does on a user's machine, so that a dependency missing from
pyproject.toml shows as a failure here. It needs that index, as ``make test``'s own install does.
"""

from __future__ import annotations

import email.parser
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.conftest import oci_connection
from tests.oci.fixture import OciTestServer
from worker.backends.registry import open_backend

REPO = Path(__file__).resolve().parents[2]
APP = """\
from worker import Out, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="orders")
@app.blob_output(arg_name="receipt", path="receipts/{queueTrigger}.txt")
def receive(msg: str, receipt: Out[str]) -> None:
    receipt.set(f"received {msg}")
"""
#: Longest pip may take to build the wheel or install it with its dependencies.
PIP_TIMEOUT = 600


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False
    )


def ok(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = run(*command, cwd=cwd, env=env)
    assert result.returncode == 0, f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def build_wheel(tmp_path: Path) -> Path:
    """The wheel pip builds from pyproject.toml, its readme, its licence and worker/, copied out of the tree first."""
    source = tmp_path / "source"
    shutil.copytree(REPO / "worker", source / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    ok(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp_path / "dist", source, cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("queueworker-*.whl")
    return wheel


def install(venv: Path, requirement: str, cwd: Path) -> None:
    """Install ``requirement`` into ``venv`` with this interpreter's pip, pinned as the suite is (constraints.txt)."""
    ok(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "--quiet",
        "--no-compile",
        "--disable-pip-version-check",
        "-c",
        REPO / "constraints.txt",
        requirement,
        cwd=cwd,
    )


def clean_environment() -> dict[str, str]:
    """This environment without what would reach the tree (PYTHONPATH) or point the worker at other storage."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not name.startswith(("WORKER__", "AzureWebJobs", "FUNCTIONS_", "PYTHON_SCRIPT_FILE_NAME"))
    }


def has_module(venv: Path, name: str, cwd: Path) -> bool:
    """Whether ``venv``'s interpreter finds the module ``name`` (run in ``cwd``, outside the tree)."""
    script = f"import importlib.util; print(importlib.util.find_spec({name!r}) is not None)"
    return ok(venv / "bin" / "python", "-c", script, cwd=cwd, env=clean_environment()).strip() == "True"


@pytest.mark.slow
@pytest.mark.subprocess
async def test_pip_install_runs_the_embedded_queue_without_the_oci_sdk_and_oci_with_the_extra(
    tmp_path: Path, oci_server: OciTestServer
) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    app = tmp_path / "app"
    app.mkdir()
    (app / "function_app.py").write_text(APP, encoding="utf-8")
    worker = venv / "bin" / "worker"
    env = clean_environment()
    try:
        ok(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
        install(venv, str(wheel), cwd=tmp_path)

        # The package imported is the installed one, and the SDK is not there to import.
        location = ok(venv / "bin" / "python", "-c", "import worker; print(worker.__file__)", cwd=app, env=env)
        assert Path(location.strip()).is_relative_to(venv), location
        assert not has_module(venv, "oci", app)
        assert importlib.util.find_spec("oci") is not None  # ... while this interpreter has it

        assert ok(worker, "--version", cwd=app, env=env) == f"worker {version}\n"
        # What a company's licence check reads: the licence, by its SPDX name and as the file, and the classifiers.
        with zipfile.ZipFile(wheel) as archive:
            info = f"queueworker-{version}.dist-info"
            metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
            assert "MIT License" in archive.read(f"{info}/licenses/LICENSE").decode()
        assert metadata["License-Expression"] == "MIT" and metadata.get_all("License-File") == ["LICENSE"]
        assert "Intended Audience :: Developers" in metadata.get_all("Classifier") and metadata["Keywords"]
        ok(worker, "send", "orders", "order-1", cwd=app, env=env)
        ok(worker, "run", "--burst", cwd=app, env=env)
        assert (app / ".worker" / "blobs" / "receipts" / "order-1.txt").read_text() == "received order-1"

        on_oci = env | {"AzureWebJobsStorage": oci_connection(oci_server)}
        install_sdk = "OCI Queue needs the OCI SDK, which is not installed: pip install 'queueworker[oci]'"
        for command in (("send", "orders", "order-2"), ("run", "--burst")):
            refused = run(worker, *command, cwd=app, env=on_oci)
            assert refused.returncode == 2, refused.stderr
            assert install_sdk in refused.stderr, refused.stderr

        install(venv, f"queueworker[oci] @ {wheel.as_uri()}", cwd=tmp_path)
        assert has_module(venv, "oci", app)
        backend, queue = open_backend(oci_connection(oci_server), tmp_path), f"orders-{uuid.uuid4().hex[:8]}"
        try:
            await backend.create_queue(queue)  # the host does not create OCI queues
            sent = run(worker, "send", queue, "order-2", cwd=app, env=on_oci)
            assert sent.returncode == 0, sent.stderr
            assert await backend.approximate_count(queue) == 1
        finally:
            await backend.delete_queue(queue)
            await backend.close()
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # some hundreds of megabytes with the SDK
