"""Fixtures shared by every test: one queue backend per supported kind, unique queue names, Spark servers, and an
OTLP/HTTP trace receiver.

The tiers' markers and groups are applied in ``tests/tiers.py``. Nothing here imports pyspark until a test
asks for Spark, so the fast tier does not pay for it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.azurite import Azurite
from tests.spark import jvm
from worker.backends.azure.queues import FAST_PATH_ENV
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.observability.logs import configure_logging

if TYPE_CHECKING:
    from tests.moto import Moto
    from tests.oci.fixture import OciTestServer
    from tests.spark.cluster import ConnectServer, StandaloneCluster
    from tests.spark.sessions import SparkSessions
    from tests.tracing.receiver import Receiver

pytest_plugins = ["tests.tiers"]

#: Every backend the host tests run on; the conformance suite and the host process tests also run on "oci" (and
#: the conformance suite on "sqs").
BACKENDS = ["sqlite", "azurite"]
#: Azurite through the SDK's public receive and delete, which the Azure backend uses where its fast path fails the
#: self-check at start (a changed SDK): the conformance suite and the host's lifecycle and process tests run on it too.
AZURITE_SDK = pytest.param("azurite-sdk", marks=pytest.mark.azurite)


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the tests start runs with the suite's options (tests/spark/jvm.py); a value set before the run is
    kept."""
    for variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(variable, jvm.options())


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """One in-memory Azurite for the whole run; tests keep apart by queue names or by clearing it."""
    emulator = Azurite().start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def oci_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """One OCI Queue test server (the published API, not the live service) for the whole run."""
    from tests.oci.fixture import OciTestServer

    server = OciTestServer(tmp_path_factory.mktemp("oci")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Moto]:
    """One moto server (SQS over real HTTP) for the whole run; tests keep apart by queue names."""
    from tests.moto import Moto

    server = Moto().start()
    yield server
    server.stop()


@pytest.fixture
def otlp_receiver() -> Iterator[Receiver]:
    """A real OTLP/HTTP trace receiver on a loopback port of its own, for this test's exporter."""
    from tests.tracing.receiver import Receiver

    receiver = Receiver().start()
    yield receiver
    receiver.stop()


def oci_connection(server: OciTestServer, long_poll: int = 2) -> str:
    """An ``oci+http://`` connection string to the test server, signing with its test key.

    Its long poll is 2 s rather than the default 5 s: a stopping worker waits out the poll under way (see the
    README), and two seconds show the same as five. Tests of the default pass ``long_poll=5``.
    """
    return (
        f"oci+http://{server.endpoint.split('://', 1)[1]}?compartment={server.compartment_id}"
        f"&config={server.config_file}&adminEndpoint={server.endpoint}&longPoll={long_poll}"
    )


@contextlib.asynccontextmanager
async def oci_queue(server: OciTestServer, tmp_path: Path, queue_name: str, **options: Any) -> AsyncIterator[QueueBackend]:
    """A backend on the test server (``options`` as :func:`open_backend` takes them) with the test's queue made;
    closed after."""
    backend = open_backend(oci_connection(server), tmp_path, **options)
    try:
        await backend.create_queue(queue_name)
        yield backend
    finally:
        await backend.close()


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def connection(backend_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The connection string of the backend under test: None is the embedded queue's default file."""
    if backend_kind in ("azurite", "azurite-sdk"):
        if backend_kind == "azurite-sdk":  # inherited by the worker processes a test starts
            request.getfixturevalue("monkeypatch").setenv(FAST_PATH_ENV, "0")
        return request.getfixturevalue("azurite").connection_string
    if backend_kind == "oci":
        return oci_connection(request.getfixturevalue("oci_server"))
    if backend_kind == "sqs":
        return request.getfixturevalue("moto_server").connection()
    return None


@pytest.fixture
async def backend(connection: str | None, tmp_path: Path) -> AsyncIterator[QueueBackend]:
    b = open_backend(connection, tmp_path)
    yield b
    await b.close()


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses (backends may be shared across tests)."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True, scope="session")
def _logging() -> None:
    """In-process hosts log as the worker does; pytest shows the lines of failing tests only."""
    configure_logging("INFO", json_lines=False)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, spark_sessions: SparkSessions) -> Iterator[StandaloneCluster]:
    """A Spark standalone cluster (master and one worker), started once per test process by the first test that asks."""
    from tests.spark.cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    spark_sessions.stop()  # a session on a cluster that is gone would retry its way to a timeout
    cluster.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory, spark_sessions: SparkSessions) -> Iterator[ConnectServer]:
    """A Spark Connect server, started once per test process by the first test that asks."""
    from tests.spark.cluster import ConnectServer

    server = ConnectServer(tmp_path_factory.mktemp("spark-connect")).start()
    spark_sessions.servers[server.url] = server
    yield server
    spark_sessions.stop()  # before the server: a Connect client whose server is gone retries for minutes
    server.stop()


@pytest.fixture(autouse=True)
def _spark_left_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each Spark test, the shared Spark servers and this process's session run no job, or the test fails,
    naming what it left running (which is then cancelled, or its server restarted).

    The Spark tests run one after another in one process on shared servers: a
    job a test leaves running (an interrupt that missed it) holds the servers'
    task slots, and every later test's jobs would queue behind it until their
    timeouts, far from the test that caused it.
    """
    sessions = request.getfixturevalue("spark_sessions") if request.node.get_closest_marker("spark") else None
    yield
    if sessions is not None and (left := sessions.left_running()):
        pytest.fail(f"{request.node.nodeid} left Spark work running: {'; '.join(left)}", pytrace=False)


@pytest.fixture(scope="session")
def spark_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSessions]:
    """The in-process Spark sessions of a test process, kept across host runs (see tests/spark/sessions.py)."""
    from tests.spark.sessions import SparkSessions

    sessions = SparkSessions(tmp_path_factory.mktemp("spark-sessions"))
    yield sessions
    sessions.stop()
