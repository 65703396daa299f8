"""A real worker signs in to OCI Queue as a resource principal (OCI Functions), an OKE workload identity or an instance
principal, with no config file.

The worker gets ``auth=resource_principal`` in its connection and the environment the platform would give it
(``OCI_RESOURCE_PRINCIPAL_VERSION=2.2`` with a session token and its private key in files, see
``OciTestServer.resource_principal_env``); the SDK's own ``get_resource_principals_signer()`` reads it and signs every
request with the token, which the test server checks against its token issuer. The test's side of the queue signs in
with the server's API key.

An OKE pod and a compute instance get their session token from endpoints of OCI (``tests/oci/stubs.py``) at
addresses and paths the SDK fixes: the worker runs in a mount namespace of its own that shows it a pod's service
account files under /var/run/secrets, or an /etc/hosts naming the auth service's stub, as the machine it stands for
would have them.

A token the service refuses (HTTP 401) is treated as any refused credential: at start it ends ``worker run`` with
one line naming it (exit 1), as a wrong account key does; once running, the worker stays up, backs off, /readyz
says why, and it goes on when the platform writes a good token (the SDK reads the token file again after a 401).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import oci_connection
from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.oci.fixture import REGION, OciTestServer, new_key
from tests.oci.stubs import (
    AUTH_HOST,
    InstanceIdentity,
    Proxymux,
    hosts_file,
    in_mount_namespace,
    mount_namespaces_refused,
    pod_files,
    signed_jwt,
)
from tests.support import apoll, free_port, get, poll
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess


@pytest.fixture
def queue_name() -> str:
    return f"rp-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def queue(oci_server: OciTestServer, tmp_path: Path, queue_name: str) -> AsyncIterator[QueueBackend]:
    """The trigger queue, made as an operator would (with a delivery limit), seen with the server's API key."""
    backend = open_backend(oci_connection(oci_server), tmp_path)
    await backend.create_queue(queue_name)
    oci_server.set_delivery_limit(queue_name, 5)
    yield backend
    await backend.delete_queue(queue_name)
    await backend.close()


@pytest.fixture
def start_worker(oci_server: OciTestServer, tmp_path: Path, queue_name: str) -> Iterator[Any]:
    """Start ``worker run`` signed in as a resource principal; it is killed at the end if still running."""
    started: list[WorkerProcess] = []

    def start(
        rp_env: dict[str, str],
        *,
        port: int | None = None,
        auth: str = "resource_principal",
        wrapper: tuple[str, ...] = (),
        admin_endpoint: bool = True,
    ) -> WorkerProcess:
        """``admin_endpoint=False``: the connection leaves the admin endpoint to the SDK (from the region)."""
        host = oci_server.endpoint.partition("://")[2]
        admin = f"&adminEndpoint={oci_server.endpoint}" if admin_endpoint else ""
        connection = (
            f"oci+http://{host}?compartment={oci_server.compartment_id}&auth={auth}"
            f"{admin}&longPoll=2"
        )  # an idle worker waits out its poll at stop
        env = {
            "AzureWebJobsStorage": connection,
            "RECORD_DB": str(tmp_path / "attempts.sqlite3"),
            "TRIGGER_QUEUE": queue_name,
            "HANDLER_MODE": "ok",
            **rp_env,
        }
        config = write_host_yaml(tmp_path, worker={"drainTimeout": "2s", **({"httpPort": port} if port else {})})
        worker = WorkerProcess(config, env, wrapper=wrapper).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def handled(tmp_path: Path) -> list[tuple[str, str]]:
    return [(r["message_id"], r["body"]) for r in attempts(tmp_path / "attempts.sqlite3") if r["event"] == "done"]


async def handles_one_message(
    worker: WorkerProcess, queue: QueueBackend, queue_name: str, tmp_path: Path, text: str
) -> None:
    """The signed-in worker takes a message, its handler sees it, it is deleted, and the worker stops cleanly."""
    worker.wait_for_log("host started", timeout=20)
    message = await queue.put(queue_name, encode(text, "base64"))
    assert poll(lambda: handled(tmp_path), 15, what="the handler to finish") == [(message.id, text)]
    await apoll(lambda: _count_is(queue, queue_name, 0), 10, what="the message to be deleted")
    assert worker.stop(timeout=45) == 0  # an idle OCI worker waits out its long poll at stop
    assert worker.totals()["succeeded"] == 1


async def test_a_worker_signed_in_as_a_resource_principal_handles_a_message(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, queue_name: str, tmp_path: Path
) -> None:
    worker = start_worker(oci_server.resource_principal_env(tmp_path / "rp"))
    await handles_one_message(worker, queue, queue_name, tmp_path, "signed with a session token")
    opened = [line for line in worker.lines() if line.get("event") == "queue storage opened"]
    assert opened and opened[0]["storage"].endswith("(resource principal)"), opened
    assert "Traceback" not in worker.log_path.read_text()


async def test_a_token_from_another_issuer_at_start_ends_the_worker_with_one_line(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, tmp_path: Path
) -> None:
    worker = start_worker(oci_server.resource_principal_env(tmp_path / "rp", valid=False), port=free_port())
    assert worker.wait(20) == 1
    log = worker.log_path.read_text()
    assert "Traceback" not in log, log
    [line] = [line for line in log.splitlines() if line.startswith("worker run: error:")]
    assert _refused_at_a_cell(oci_server, line), line
    assert "not issued by this server's token issuer" in line
    assert "ST$" not in log and "eyJ" not in log  # the token is a credential: never logged


#: Long enough for the worker to start with the first token on a loaded machine (6 s was not), short enough to wait
#: for it to expire.
SHORT_LIFETIME = 12


async def test_a_token_rotated_to_another_issuer_keeps_the_worker_up_not_ready_until_a_good_one_comes(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, queue_name: str, tmp_path: Path
) -> None:
    port = free_port()
    rp_env = oci_server.resource_principal_env(tmp_path / "rp", lifetime=SHORT_LIFETIME)
    worker = start_worker(rp_env, port=port)
    worker.wait_for_log("host started", timeout=SHORT_LIFETIME - 1)
    assert get(port, "/readyz")[0] == 200
    # The platform's next token comes from the wrong issuer; the SDK reads it once the first one has expired.
    oci_server.renew_resource_principal_token(rp_env, valid=False)

    def not_ready() -> dict[str, Any] | None:
        assert worker.proc is not None
        if worker.proc.poll() is not None:
            raise AssertionError(f"the worker exited with {worker.proc.returncode}:\n{worker.log_path.read_text()}")
        status, body = get(port, "/readyz")
        return json.loads(body) if status == 503 else None

    ready = poll(not_ready, SHORT_LIFETIME + 10, interval=0.2, what="/readyz to answer 503")
    [problem] = ready["problems"]
    assert _refused_at_a_cell(oci_server, problem), problem
    assert "not issued by this server's token issuer" in problem
    assert get(port, "/healthz")[0] == 200

    oci_server.renew_resource_principal_token(rp_env)
    poll(lambda: get(port, "/readyz")[0] == 200, 10, interval=0.2, what="/readyz once a good token is written")
    message = await queue.put(queue_name, encode("after the rotation", "base64"))
    assert poll(lambda: handled(tmp_path), 15, what="the handler to finish") == [(message.id, "after the rotation")]
    assert worker.stop(timeout=45) == 0  # an idle OCI worker waits out its long poll at stop
    log = worker.log_path.read_text()
    assert "Traceback" not in log, log


async def _count_is(backend: QueueBackend, queue: str, count: int) -> bool:
    return await backend.approximate_count(queue) == count


def _refused_at_a_cell(server: OciTestServer, text: str) -> bool:
    """Whether ``text`` says a sign-in was refused by one of the server's endpoints: the queue's own messages
    endpoint (another cell's, for half the queues) or the control plane's."""
    return any(
        f"sign-in was refused by {endpoint} (resource principal): HTTP 401 NotAuthenticated" in text
        for endpoint in {server.endpoint, *server.messages_endpoints}
    )


def _refused_at_start(worker: WorkerProcess, oci_server: OciTestServer, who: str) -> None:
    """The worker ended at start with one line: the test server refused the session token its sign-in brought."""
    assert worker.wait(30) == 1
    log = worker.log_path.read_text()
    assert "Traceback" not in log, log
    [line] = [line for line in log.splitlines() if line.startswith("worker run: error:")]
    assert any(
        f"sign-in was refused by {endpoint} ({who}): HTTP 401 NotAuthenticated" in line
        for endpoint in {oci_server.endpoint, *oci_server.messages_endpoints}
    ), line
    assert "not issued by this server's token issuer" in line
    assert "ST$" not in log and "eyJ" not in log  # tokens are credentials: never logged


T = TypeVar("T")


def _skip_without_mount_namespaces() -> None:
    if why := mount_namespaces_refused():
        pytest.skip(f"the worker must see a pod's or an instance's files in a mount namespace of its own: {why}")


def _identity_stub(make: Callable[[], T], cannot: str) -> T:
    """An identity service's stub that the worker reaches at its well-known address from a mount namespace."""
    _skip_without_mount_namespaces()
    try:
        return make()
    except OSError as exc:
        pytest.skip(f"{cannot}: {exc}")


@pytest.fixture
def proxymux(oci_server: OciTestServer, tmp_path: Path) -> Iterator[Proxymux]:
    stub = _identity_stub(
        lambda: Proxymux(oci_server, tmp_path / "cluster-ca"),
        f"cannot listen on the proxymux port {Proxymux.PORT} of a loopback address",
    )
    yield stub
    stub.close()


def pod(proxymux: Proxymux, folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """What a pod of an OKE enhanced cluster has: the API server's address (the proxymux answers on it), the region
    the workload's deployment sets, and the service account's token and CA where Kubernetes mounts them."""
    env = {"KUBERNETES_SERVICE_HOST": proxymux.stub.host, "OCI_RESOURCE_PRINCIPAL_REGION": REGION}
    return env, in_mount_namespace({"/var/run": pod_files(folder, proxymux)})


async def test_a_worker_in_an_oke_pod_signs_in_with_its_workload_identity_and_handles_a_message(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, queue_name: str, proxymux: Proxymux, tmp_path: Path
) -> None:
    env, wrapper = pod(proxymux, tmp_path / "pod-run")
    worker = start_worker(env, auth="oke_workload_identity", wrapper=wrapper)
    await handles_one_message(worker, queue, queue_name, tmp_path, "signed as a workload")
    assert proxymux.stub.requests, "the worker never asked the proxymux"
    for request in proxymux.stub.requests:  # each one the stub answered with a token, as it checked its shape
        assert request.headers["authorization"] == f"Bearer {proxymux.service_account_token}"
        assert set(request.json()) == {"podKey"}
    assert "Traceback" not in worker.log_path.read_text()


async def test_an_oke_workload_token_from_another_issuer_ends_the_worker_with_one_line(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, proxymux: Proxymux, tmp_path: Path
) -> None:
    proxymux.valid = False
    env, wrapper = pod(proxymux, tmp_path / "pod-run")
    _refused_at_start(start_worker(env, auth="oke_workload_identity", wrapper=wrapper), oci_server, "oke workload identity")


async def test_an_oke_pod_without_a_region_ends_the_worker_naming_the_variable_to_set(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, proxymux: Proxymux, tmp_path: Path
) -> None:
    """OKE does not set OCI_RESOURCE_PRINCIPAL_REGION, from which the SDK takes the admin endpoint: a deployment that
    leaves it out, with no adminEndpoint= either, is told at start which variable to set."""
    env, wrapper = pod(proxymux, tmp_path / "pod-run")
    del env["OCI_RESOURCE_PRINCIPAL_REGION"]
    worker = start_worker(env, auth="oke_workload_identity", wrapper=wrapper, admin_endpoint=False)
    assert worker.wait(30) == 1
    log = worker.log_path.read_text()
    [line] = [line for line in log.splitlines() if line.startswith("worker run: error:")]
    assert "no OCI Queue admin endpoint" in line and "OCI_RESOURCE_PRINCIPAL_REGION" in line, line
    assert "Traceback" not in log


async def test_a_service_account_token_the_proxymux_does_not_know_ends_the_worker_naming_the_sign_in(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, proxymux: Proxymux, tmp_path: Path
) -> None:
    env, wrapper = pod(proxymux, tmp_path / "pod-run")
    other = signed_jwt({"sub": "system:serviceaccount:queues:other", "exp": int(time.time()) + 3600}, new_key())
    (tmp_path / "pod-run" / "secrets" / "kubernetes.io" / "serviceaccount" / "token").write_text(other)
    worker = start_worker(env, auth="oke_workload_identity", wrapper=wrapper)
    assert worker.wait(30) == 1
    log = worker.log_path.read_text()
    [line] = [line for line in log.splitlines() if line.startswith("worker run: error:")]
    assert "cannot sign in to OCI Queue as an OKE workload identity: ServiceError:" in line
    assert "Failed to get RPST token from proxymux" in line
    assert "Traceback" not in log and other not in log
    assert [request.headers["authorization"] for request in proxymux.stub.requests] == [f"Bearer {other}"]


@pytest.fixture
def instance(oci_server: OciTestServer, tmp_path: Path) -> Iterator[InstanceIdentity]:
    stub = _identity_stub(
        lambda: InstanceIdentity(oci_server, tmp_path / "auth-tls"),
        "cannot listen on port 443 of a loopback address for the auth service",
    )
    yield stub
    stub.close()


def compute_instance(instance: InstanceIdentity, folder: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """What the worker sees on a compute instance: its metadata service (at the SDK's own override,
    ``OCI_METADATA_BASE_URL``), and the auth service of its region by name, with a certificate it trusts (requests'
    ``REQUESTS_CA_BUNDLE``, which the SDK's federation client honours)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {"OCI_METADATA_BASE_URL": instance.metadata_url, "REQUESTS_CA_BUNDLE": str(instance.tls.ca_file)}
    hosts = hosts_file(folder / "hosts", {AUTH_HOST: instance.federation.host})
    return env, in_mount_namespace({"/etc/hosts": hosts})


async def test_a_worker_on_a_compute_instance_signs_in_as_an_instance_principal_and_handles_a_message(
    oci_server: OciTestServer,
    start_worker: Any,
    queue: QueueBackend,
    queue_name: str,
    instance: InstanceIdentity,
    tmp_path: Path,
) -> None:
    env, wrapper = compute_instance(instance, tmp_path / "instance")
    worker = start_worker(env, auth="instance_principal", wrapper=wrapper)
    await handles_one_message(worker, queue, queue_name, tmp_path, "signed as an instance")
    asked = {request.target for request in instance.metadata.requests}
    assert asked == {
        "/opc/v2/instance/region",
        "/opc/v2/identity/cert.pem",
        "/opc/v2/identity/key.pem",
        "/opc/v2/identity/intermediate.pem",
    }, asked
    assert {(r.method, r.target) for r in instance.federation.requests} == {("POST", "/v1/x509")}
    assert "Traceback" not in worker.log_path.read_text()


async def test_an_instance_principal_token_from_another_issuer_ends_the_worker_with_one_line(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, instance: InstanceIdentity, tmp_path: Path
) -> None:
    instance.valid = False
    env, wrapper = compute_instance(instance, tmp_path / "instance")
    _refused_at_start(start_worker(env, auth="instance_principal", wrapper=wrapper), oci_server, "instance principal")
