"""The private parts of dependencies the worker uses (ARCHITECTURE.md lists them), each made to change here.

Each test takes a part away from the installed dependency as an upgrade would
(an attribute gone or renamed, a module that no longer imports), then shows
what the worker does: it goes on by a public path after one warning naming
the dependency's version, or, for PySpark, whose parts no fallback replaces,
``worker run`` refuses to start in one line (and ``worker completion``, for
argparse's, writes one line instead of a script). The untouched dependency is
checked too, so that each test also proves the part is used where it is there.
ARCHITECTURE.md's table is held to the code: every module of the worker that
imports a dependency's private module has a row.
"""

from __future__ import annotations

import ast
import importlib
import platform
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import oci
import pytest
import requests
from aiohttp import web
from azure.core.rest import HttpRequest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.cli import run_cli
from tests.support import captured_logs
from worker import dependencies
from worker.backends.azure import errors as azure_errors
from worker.backends.oci import calls
from worker.backends.oci import errors as oci_errors
from worker.backends.oci.auth import client_kwargs
from worker.dependencies import version
from worker.middleware import spark
from worker.middleware.spark_settings import SparkSettings
from worker.ops import completion
from worker.settings.config import HostConfig


@pytest.fixture(autouse=True)
def once_per_test() -> Iterator[None]:
    """Each test starts with no warning given yet and PySpark not yet checked."""
    dependencies._once.cache_clear()
    spark.private_parts_problem.cache_clear()
    yield
    dependencies._once.cache_clear()
    spark.private_parts_problem.cache_clear()


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """What :func:`worker.dependencies.fall_back` logs during the test."""
    with captured_logs(monkeypatch, dependencies) as logs:
        yield logs


def said(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(line["dependency"], line["part"]) for line in logs if line["log_level"] == "warning"]


# -- azure-core's AioHttpTransport and aiohttp's ClientSession (worker/backends/azure/errors.py) -----------------------


@pytest.fixture
async def server() -> Any:
    """An HTTP server on loopback that answers every GET with 200, for a transport to send to."""

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    await runner.cleanup()


async def sent_through(url: str) -> aiohttp.ClientSession:
    """Open a worker transport, send one GET through it, and return its session (closed again)."""
    transport = azure_errors.Transport(use_env_settings=False)
    try:
        await transport.open()
        response = await transport.send(HttpRequest("GET", url))
        assert response.status_code == 200
        session = transport.session
        assert session is not None
        return session
    finally:
        await transport.close()


async def test_the_transport_reuses_no_long_idle_connection_and_turns_aiohttps_hidden_retry_off(
    server: str, warnings: list[dict[str, Any]]
) -> None:
    transport = azure_errors.Transport(use_env_settings=False)
    try:
        await transport.open()
        assert transport.session is not None
        assert transport.session.connector._keepalive_timeout == azure_errors.IDLE_CONNECTION_SECONDS
        assert transport.session._retry_connection is False
        assert (await transport.send(HttpRequest("GET", server))).status_code == 200
    finally:
        await transport.close()
    assert said(warnings) == []


async def test_without_azure_cores_session_state_the_transport_uses_azure_cores_own_session_after_one_warning(
    server: str, warnings: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An azure-core that renamed one of the attributes Transport.open reads: the worker finds it missing.
    monkeypatch.setattr(azure_errors, "_TRANSPORT_STATE", ("_session_owner", "_has_been_opened", "_env_settings_renamed"))
    transport = azure_errors.Transport(use_env_settings=False)
    try:
        await transport.open()
        assert transport.session is not None
        # azure-core's own session: aiohttp's default keep-alive, not the worker's shorter one.
        assert transport.session.connector._keepalive_timeout != azure_errors.IDLE_CONNECTION_SECONDS
        assert transport.session._retry_connection is False  # the other part still applies
        assert (await transport.send(HttpRequest("GET", server))).status_code == 200
    finally:
        await transport.close()
    await sent_through(server)  # a second transport: no second warning
    assert said(warnings) == [("azure-core", "AioHttpTransport's _session_owner, _has_been_opened, _env_settings_renamed")]
    assert version("azure-core") in warnings[0]["event"]


async def test_without_aiohttps_retry_switch_the_transport_sends_as_aiohttp_does_after_one_warning(
    server: str, warnings: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An aiohttp that renamed the switch: the worker finds no attribute of the name it knows, and sets none.
    monkeypatch.setattr(azure_errors, "_RETRY_SWITCH", "_retry_connection_renamed")
    first = await sent_through(server)
    await sent_through(server)
    assert first._retry_connection is True  # aiohttp's own default: its hidden retry stays on
    assert not hasattr(first, "_retry_connection_renamed")
    assert said(warnings) == [("aiohttp", "ClientSession._retry_connection_renamed")]
    assert f"aiohttp {version('aiohttp')} is not as this worker expects" in warnings[0]["event"]


# -- the OCI SDK's vendored requests and connection pools (worker/backends/oci/errors.py, calls.py) ------------------


@pytest.fixture
def oci_client() -> Any:
    """A real OCI Queue client, signed with a key made here, whose service is a port nothing listens on."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    config = {
        "user": "ocid1.user.oc1..test",
        "tenancy": "ocid1.tenancy.oc1..test",
        "fingerprint": ":".join(["ab"] * 16),
        "key_content": pem,
        "region": "us-ashburn-1",
    }
    signer = oci.signer.Signer(config["tenancy"], config["user"], config["fingerprint"], None, private_key_content=pem)
    return oci.queue.QueueClient(config, service_endpoint="http://127.0.0.1:1", **client_kwargs(signer, 5))


def refused_call(client: Any) -> BaseException:
    """A GetStats on ``client`` that the closed port refuses, made as the backend makes its calls: in a thread of
    its own, which tracks its clients' sending (:func:`worker.backends.oci.calls.track_sending`)."""
    failures: list[BaseException] = []

    def call() -> None:
        calls.track_sending(client)
        try:
            with calls.sending():
                client.get_stats("ocid1.queue.oc1..test")
        except Exception as exc:
            failures.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(30)
    assert len(failures) == 1
    return failures[0]


class PoolsMoved:
    """An OCI client of an SDK whose clients no longer hold requests' session where the worker looks for it."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        if name == "base_client":
            raise AttributeError(name)
        return getattr(self._client, name)


def test_a_refused_connection_is_known_to_have_sent_nothing_where_the_pools_are_tracked(
    oci_client: Any, warnings: list[dict[str, Any]]
) -> None:
    failure = refused_call(oci_client)
    assert failure.request_sent is False  # type: ignore[attr-defined]
    assert not oci_errors.may_have_acted(failure)  # a put that failed so may be sent again
    assert said(warnings) == []


def test_where_the_sdks_pools_moved_every_failed_call_counts_as_sent_after_one_warning(
    oci_client: Any, warnings: list[dict[str, Any]]
) -> None:
    failure = refused_call(PoolsMoved(oci_client))
    assert failure.request_sent is True  # type: ignore[attr-defined]
    assert oci_errors.may_have_acted(failure)  # so a put is never sent twice
    refused_call(PoolsMoved(oci_client))
    assert [dependency for dependency, _ in said(warnings)] == ["oci"]
    assert "base_client" in warnings[0]["part"] and version("oci") in warnings[0]["event"]


def test_an_oci_sdk_without_its_vendored_requests_is_read_with_the_installed_one_after_one_warning(
    warnings: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An SDK that no longer vendors requests: its private module does not import.
    monkeypatch.setitem(sys.modules, "oci._vendor.requests", None)
    try:
        reloaded = importlib.reload(oci_errors)
        refused = oci.exceptions.RequestException(requests.exceptions.ConnectionError("connection refused"))
        assert reloaded.is_transient(refused)
        assert not reloaded.is_transient(requests.exceptions.InvalidURL("no host"))
        assert said(warnings) == [("oci", "oci._vendor.requests")]
    finally:
        monkeypatch.undo()
        importlib.reload(oci_errors)
    assert oci_errors.vendored_requests is not None


# -- azure.functions' private _abc (worker/compat/functions.py) -----------------------------------------------------


def test_the_host_contexts_pass_azure_functions_private_isinstance_checks(warnings: list[dict[str, Any]]) -> None:
    from azure.functions import _abc

    from worker.compat import functions
    from worker.context import RetryContext, TraceContext

    assert functions.register_private_contexts()
    assert issubclass(TraceContext, _abc.TraceContext) and issubclass(RetryContext, _abc.RetryContext)
    assert said(warnings) == []


def test_an_azure_functions_without_its_private_abcs_loads_apps_the_same_after_one_warning(
    warnings: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import azure.functions

    from worker.compat import functions

    monkeypatch.delattr(azure.functions, "_abc")
    monkeypatch.setitem(sys.modules, "azure.functions._abc", None)
    assert not functions.register_private_contexts()
    assert not functions.register_private_contexts()
    assert said(warnings) == [
        ("azure-functions", "azure.functions._abc: import of azure.functions._abc halted; None in sys.modules")
    ]


# -- PySpark's private parts (worker/middleware/spark.py): refused at start ------------------------------------------


def test_the_installed_pyspark_has_every_private_part_the_spark_middleware_uses() -> None:
    assert spark.private_parts_problem(remote=False) is None
    assert spark.private_parts_problem(remote=True) is None


def test_worker_run_refuses_a_pyspark_without_its_private_parts_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import SparkContext

    monkeypatch.delattr(SparkContext, "_gateway")
    # A second problem, so that the command ends at the check whatever it finds about Spark.
    ran = run_cli(
        tmp_path,
        "run",
        "--no-supervisor",
        "--app",
        "tests.apps.spark_first:started",
        env={"FUNCTIONS_WORKER_RUNTIME": "node"},
    )
    assert ran.returncode == 2, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if "pyspark" in line]
    assert len(lines) == 1, ran.stderr
    assert (
        f"spark: pyspark {version('pyspark')} is not as this worker expects (SparkContext._gateway); install "
        "the pyspark of constraints.txt"
    ) in lines[0]
    assert "Traceback" not in ran.stderr


def test_a_connect_session_is_refused_without_the_connect_clients_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pyspark.sql.connect.client import SparkConnectClient

    monkeypatch.delattr(SparkConnectClient, "set_retry_policies")
    connect = spark.Spark(spark.SparkProvider(SparkSettings(master="sc://127.0.0.1:1")))
    problem = spark.start_problem([], [connect], HostConfig(base_dir=tmp_path))
    assert problem is not None and "(SparkConnectClient.set_retry_policies)" in problem
    # A classic session needs none of the Connect client's parts.
    local = spark.Spark(spark.SparkProvider(SparkSettings(master="local[1]")))
    assert spark.start_problem([], [local], HostConfig(base_dir=tmp_path)) is None


def test_a_host_that_asks_for_no_spark_is_not_refused_for_pyspark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pyspark import SparkContext

    monkeypatch.delattr(SparkContext, "_gateway")
    assert spark.start_problem([], [], HostConfig(base_dir=tmp_path)) is None


def test_a_handler_that_asks_for_spark_anyway_is_told_why_it_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    monkeypatch.delattr(SparkContext, "_gateway")
    provider = spark.SparkProvider(SparkSettings(master="local[1]", start_timeout=30))
    with pytest.raises(spark.SparkUnavailable, match=r"pyspark .* is not as this worker expects"):
        provider.session()
    assert "SparkContext._gateway" in str(provider.problem())  # /readyz says why


# -- argparse's private parts (worker/ops/completion.py) -------------------------------------------------------------


def test_worker_completion_is_written_from_argparses_private_parts(tmp_path: Path) -> None:
    ran = run_cli(tmp_path, "completion", "bash")
    assert ran.returncode == 0 and "start-cluster" in ran.stdout


@pytest.mark.parametrize("part", ["_ACTIONS", "_SUBPARSERS"])
def test_a_python_whose_argparse_moved_them_gets_one_line_instead_of_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: str
) -> None:
    monkeypatch.setattr(completion, part, "_renamed_in_this_python")  # a Python whose argparse renamed it
    ran = run_cli(tmp_path, "completion", "bash")
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == (
        f"worker completion: error: Python {platform.python_version()}'s argparse has no "
        f"{completion._ACTIONS} or {completion._SUBPARSERS}, which the "
        "completion script is written from\n"
    )


# -- ARCHITECTURE.md's table ------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def table() -> list[list[str]]:
    """The rows of ARCHITECTURE.md's "Private parts of dependencies" table, cell by cell."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Private parts of dependencies", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_every_row_names_a_module_of_the_worker_and_its_tests() -> None:
    rows = table()
    assert len(rows) >= 10
    for where, *_, tests in rows:
        assert (ROOT / "worker" / where.strip("`")).is_file(), where
        assert all(re.fullmatch(r"`\w+/test_\w+\.py`", test) for test in tests.split(", ")), tests


def test_every_module_that_imports_a_dependencys_private_module_has_a_row() -> None:
    importing = set()
    for path in (ROOT / "worker").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(
                part.startswith("_") and not part.startswith("__")
                for name in names
                if name.split(".")[0] not in ("worker", "__future__")
                for part in name.split(".")[1:]
            ):
                importing.add(str(path.relative_to(ROOT / "worker")))
    assert importing, "the scan finds the imports it is meant to find"
    assert importing <= {where.strip("`") for where, *_ in table()}
