"""Storage that cannot be used is named with its cause, never a traceback: corrupted files, closed ports, bad keys."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from azure.storage.queue import QueueClient

from tests.azurite import ACCOUNT, KEY, Azurite
from tests.conftest import oci_connection
from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.identity import IDENTITY_HEADER, TokenEndpoint, loopback_certificate
from tests.oci.fixture import OciTestServer
from tests.support import closed_port, free_port, get, poll

REPO = Path(__file__).resolve().parents[2]


def _worker(
    folder: Path, *args: str, connection: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}, **(env or {})}
    env["PYTHONPATH"] = str(REPO)
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("content", [b"this is a text file, not a queue\n", b"\x00" * 4096], ids=["text", "zeros"])
def test_a_file_that_is_not_a_sqlite_database_is_refused_naming_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    queue_file = tmp_path / ".worker" / "queues.sqlite3"
    queue_file.parent.mkdir()
    queue_file.write_bytes(content)

    for args in (("run", "--burst", "--app", "tests.apps.recording:app"), ("queues",), ("send", "work", "x")):
        result = _worker(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert f"embedded queue file {queue_file} is not a SQLite database" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert queue_file.read_bytes() == content  # refused, never written over


@pytest.mark.subprocess
def test_an_empty_file_becomes_a_new_queue_file(tmp_path: Path) -> None:
    queue_file = tmp_path / ".worker" / "queues.sqlite3"
    queue_file.parent.mkdir()
    queue_file.touch()
    assert _worker(tmp_path, "send", "work", "x").returncode == 0
    assert queue_file.read_bytes().startswith(b"SQLite format 3\x00")


def _azure(endpoint: str, key: str = KEY) -> str:
    return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};QueueEndpoint={endpoint};"


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("endpoint", "cause"),
    [
        ("http://127.0.0.1:{closed_port}/" + ACCOUNT, "connection refused"),
        (f"http://nosuchhost.invalid/{ACCOUNT}", "name not resolved"),
    ],
    ids=["closed-port", "unresolvable-name"],
)
def test_unreachable_storage_is_named_with_its_cause(tmp_path: Path, endpoint: str, cause: str) -> None:
    """The closed port is held (bound, not listening) while the test runs: a port only free when the test was
    collected may be another test's server by the time it runs (once an Azurite with a queue, which answered)."""
    with closed_port() as port:
        endpoint = endpoint.format(closed_port=port)
        result = _worker(tmp_path, "queues", connection=_azure(endpoint))

    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert endpoint in line and cause in line, line
    assert "HTTP None" not in line


@pytest.mark.subprocess
def test_a_wrong_account_key_is_named_with_the_service_error_code(tmp_path: Path, azurite: Azurite) -> None:
    wrong = "d3Jvbmcga2V5IGZvciB0aGUgZW11bGF0b3IgYWNjb3VudCwgb2YgdGhlIHJpZ2h0IGxlbmd0aCBmb3IgYSBrZXk/PT0="
    result = _worker(tmp_path, "queues", connection=_azure(f"http://127.0.0.1:{azurite.port}/{ACCOUNT}", wrong))

    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "HTTP 403 AuthenticationFailed" in line, line
    assert wrong not in result.stderr


@pytest.mark.subprocess
def test_a_sign_in_that_fails_at_start_keeps_the_host_up_and_it_recovers_when_the_identity_works(tmp_path: Path) -> None:
    """An identity-based connection whose credential cannot get a token yet: /readyz says why; then it works."""
    cert, key = loopback_certificate(tmp_path)
    emulator = Azurite(tls=(cert, key)).start()
    token_endpoint = TokenEndpoint(free_port())
    http_port = free_port()
    worker = WorkerProcess(
        write_host_yaml(tmp_path, worker={"httpPort": http_port}),
        {
            "AzureWebJobsStorage__queueServiceUri": emulator.queue_endpoint,
            "IDENTITY_ENDPOINT": token_endpoint.url,
            "IDENTITY_HEADER": IDENTITY_HEADER,
            "SSL_CERT_FILE": str(cert),
            "RECORD_DB": str(tmp_path / "record.db"),
        },
    )
    try:
        worker.start()
        worker.wait_for_log("host started", timeout=60)

        def not_ready_because_of_sign_in() -> str | None:
            status, body = get(http_port, "/readyz")
            return body if status == 503 and "sign-in failed" in body else None

        body = poll(not_ready_because_of_sign_in, 60, what="/readyz to name the failed sign-in")
        assert emulator.queue_endpoint in body
        assert get(http_port, "/healthz")[0] == 200

        token_endpoint.start()
        poll(lambda: get(http_port, "/readyz")[0] == 200, 90, what="/readyz once the identity works")
        client = QueueClient(
            emulator.queue_endpoint,
            "work",
            credential={"account_name": ACCOUNT, "account_key": KEY},
            connection_verify=str(cert),
        )
        client.send_message(base64.b64encode(b"after sign-in").decode())
        poll(
            lambda: [row for row in attempts(tmp_path / "record.db") if row["event"] == "done"],
            60,
            what="the message to be handled",
        )
        assert worker.stop() == 0
    finally:
        worker.kill()
        token_endpoint.stop()
        emulator.stop()
    text = worker.log_path.read_text()
    assert "Traceback" not in text
    assert token_endpoint.requests >= 1
    failures = [line for line in worker.lines() if "sign-in failed" in str(line.get("error", ""))]
    assert failures, text


@pytest.mark.subprocess
def test_json_output_stays_json_while_storage_is_retried(tmp_path: Path, azurite: Azurite) -> None:
    """A retried storage call must not print its warning into stdout's JSON (it went there before)."""
    from tests.reliability.faultproxy import Fault, FaultProxy

    proxy = FaultProxy(azurite.port).start()
    try:
        proxy.inject(Fault.ERROR_503, count=2)  # the first attempts fail; the retries answer
        result = _worker(tmp_path, "queues", "--json", connection=proxy.connection_string)
    finally:
        proxy.stop()
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list), result.stdout


@pytest.mark.subprocess
def test_oci_settings_and_queues_that_cannot_work_are_refused_at_start_each_named(
    tmp_path: Path, oci_server: OciTestServer
) -> None:
    """batchSize over OCI's 20 is refused before anything opens; a missing queue, and a queue whose poison would
    never leave it (no dead-letter delivery limit), once the service has been asked. Nothing is created."""
    import oci

    connection = oci_connection(oci_server)
    (tmp_path / "host.yaml").write_text("version: '2.0'\nextensions:\n  queues:\n    batchSize: 32\n", encoding="utf-8")
    missing = f"missing-{tmp_path.name[-8:]}"

    def run() -> subprocess.CompletedProcess[str]:
        """``worker run --burst`` of the recording app on the missing queue, over OCI."""
        env = {"TRIGGER_QUEUE": missing, "RECORD_DB": str(tmp_path / "r.db")}
        return _worker(tmp_path, "run", "--burst", "--app", "tests.apps.recording:app", connection=connection, env=env)

    result = run()
    assert result.returncode == 2, result.stderr
    assert (
        "function recorder, trigger queueTrigger (msg): extensions.queues.batchSize is 32, more than OCI Queue "
        "takes: at most 20 messages a receive returns"
    ) in result.stderr, result.stderr

    (tmp_path / "host.yaml").write_text("version: '2.0'\n", encoding="utf-8")
    result = run()
    assert result.returncode == 2, result.stderr
    assert f"queue {missing!r} does not exist" in result.stderr and "does not create queues" in result.stderr

    admin = oci.queue.QueueAdminClient(
        oci.config.from_file(str(oci_server.config_file)), service_endpoint=oci_server.endpoint
    )
    assert admin.list_queues(compartment_id=oci_server.compartment_id, display_name=missing).data.items == []
    admin.create_queue(oci.queue.models.CreateQueueDetails(display_name=missing, compartment_id=oci_server.compartment_id))
    result = run()
    assert result.returncode == 2, result.stderr
    assert "has no dead-letter delivery limit (deadLetterQueueDeliveryCount 0)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
