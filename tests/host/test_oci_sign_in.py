"""A real worker signs in to OCI Queue as a resource principal (OCI Functions, OKE workload identity), no config file.

The worker gets ``auth=resource_principal`` in its connection and the environment the platform would give it
(``OCI_RESOURCE_PRINCIPAL_VERSION=2.2`` with a session token and its private key in files, see
``OciTestServer.resource_principal_env``); the SDK's own ``get_resource_principals_signer()`` reads it and signs every
request with the token, which the test server checks against its token issuer. The test's side of the queue signs in
with the server's API key.

A token the service refuses (HTTP 401) is treated as any refused credential: at start it ends ``worker run`` with
one line naming it (exit 1), as a wrong account key does; once running, the worker stays up, backs off, /readyz
says why, and it goes on when the platform writes a good token (the SDK reads the token file again after a 401).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import oci_connection
from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.oci.fixture import OciTestServer
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

    def start(rp_env: dict[str, str], *, port: int | None = None) -> WorkerProcess:
        host = oci_server.endpoint.partition("://")[2]
        connection = (f"oci+http://{host}?compartment={oci_server.compartment_id}&auth=resource_principal"
                      f"&adminEndpoint={oci_server.endpoint}")
        env = {"AzureWebJobsStorage": connection, "RECORD_DB": str(tmp_path / "attempts.sqlite3"),
               "TRIGGER_QUEUE": queue_name, "HANDLER_MODE": "ok", **rp_env}
        config = write_host_yaml(tmp_path, worker={"drainTimeout": "2s", **({"httpPort": port} if port else {})})
        worker = WorkerProcess(config, env).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def handled(tmp_path: Path) -> list[tuple[str, str]]:
    return [(r["message_id"], r["body"]) for r in attempts(tmp_path / "attempts.sqlite3") if r["event"] == "done"]


async def test_a_worker_signed_in_as_a_resource_principal_handles_a_message(
    oci_server: OciTestServer, start_worker: Any, queue: QueueBackend, queue_name: str, tmp_path: Path
) -> None:
    worker = start_worker(oci_server.resource_principal_env(tmp_path / "rp"))
    worker.wait_for_log("host started", timeout=20)
    message = await queue.put(queue_name, encode("signed with a session token", "base64"))

    assert poll(lambda: handled(tmp_path), 15, what="the handler to finish") == [
        (message.id, "signed with a session token")]
    await apoll(lambda: _count_is(queue, queue_name, 0), 10, what="the message to be deleted")
    assert worker.stop(timeout=45) == 0  # an idle OCI worker waits out its long poll (20 s) at stop
    assert worker.totals()["succeeded"] == 1
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


#: Long enough for the worker to start with the first token, short enough to wait for it to expire.
SHORT_LIFETIME = 6


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
    assert worker.stop(timeout=45) == 0  # an idle OCI worker waits out its long poll (20 s) at stop
    log = worker.log_path.read_text()
    assert "Traceback" not in log, log


async def _count_is(backend: QueueBackend, queue: str, count: int) -> bool:
    return await backend.approximate_count(queue) == count


def _refused_at_a_cell(server: OciTestServer, text: str) -> bool:
    """Whether ``text`` says a sign-in was refused by one of the server's endpoints: the queue's own messages
    endpoint (another cell's, for half the queues) or the control plane's."""
    return any(f"sign-in was refused by {endpoint} (resource principal): HTTP 401 NotAuthenticated" in text
               for endpoint in {server.endpoint, *server.messages_endpoints})
