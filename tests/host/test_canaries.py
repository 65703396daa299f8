"""No secret leaves a worker through any channel: canaries planted everywhere a secret is given, then looked for.

The worker is given a distinctive secret in every place a user puts one: a
connection string with an account key (Azurite's), the environment's AWS
credentials with a session token (moto's SQS signs with them), an endpoint URL
with a password where nothing listens, a Spark Connect master with its token
(that never answers), the OCI Queue test server's private key, the endpoints' token, and a handler's exception that
quotes a SAS URL and the rest. Then every channel is read, the way an
attacker reading what the worker emits would: its log at DEBUG (set by
host.json's ``Debug``, and by ``--log-level DEBUG``), stdout and stderr, the
spans an OTLP/HTTP receiver on loopback got, ``/readyz``, ``/metrics``, the
console's state and the CLI's errors. None may hold a canary, whole,
URL-encoded or in part; each channel is first shown to have carried the text
that held one (redacted), so that a channel that said nothing passes nothing.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from tests.azurite import ACCOUNT, KEY, Azurite
from tests.conftest import oci_connection
from tests.host.processes import REPO, WorkerProcess, worker_environment
from tests.moto import Moto
from tests.oci.fixture import OciTestServer
from tests.support import closed_port, fetch, free_port, poll
from tests.tracing.receiver import Receiver
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

APP = "tests.apps.canaries:app"
SAS_SIG = "CanarySasSignature0a1b2c3d%2Be4f5%3D"
AWS_KEY_ID = "AKIACANARYKEY0ID1234"
AWS_SECRET = "CanaryAwsSecretAccessKey0123456789abcdefg"
AWS_SESSION = "CanaryAwsSessionToken//////////wEaDHRvb2Jhcg0123"
URL_PASSWORD = "CanaryUrlPassw0rd"
SPARK_TOKEN = "CanarySparkConnectToken0123"
ENDPOINT_TOKEN = "CanaryEndpointToken0123456789abcdef"
#: Every canary, by what it stands for.
CANARIES = {
    "account key": KEY,
    "SAS signature": SAS_SIG,
    "AWS access key id": AWS_KEY_ID,
    "AWS secret key": AWS_SECRET,
    "AWS session token": AWS_SESSION,
    "URL password": URL_PASSWORD,
    "Spark Connect token": SPARK_TOKEN,
    "endpoint token": ENDPOINT_TOKEN,
}
#: The SDKs whose loggers a host.json may name.
SDKS = ("botocore", "urllib3", "oci", "azure")
#: What a handler that failed to download a SAS URL through a proxy raises, quoting every secret it had at hand.
FAILURE = (
    f"HTTP Error 403 for https://acct.blob.core.windows.net/in/orders.csv?sv=2022-11-02&sr=b&sp=r&sig={SAS_SIG} "
    f"through http://canary:{URL_PASSWORD}@proxy.example:3128 (Authorization: Bearer {ENDPOINT_TOKEN}); "
    f"session {AWS_SESSION}, key {AWS_KEY_ID}/{AWS_SECRET}; spark sc://spark.example:443/;token={SPARK_TOKEN}"
)


def leaks(text: str, canaries: dict[str, str] = CANARIES) -> list[str]:
    """The canaries ``text`` holds, in any form a leak could take: whole, URL-encoded, or a long enough piece."""
    found = []
    for what, secret in canaries.items():
        forms = {secret, quote(secret, safe=""), secret[:16], secret[-16:]}
        if any(form in text for form in forms):
            found.append(what)
    return found


@dataclass
class CanaryWorker(WorkerProcess):
    """A ``worker run`` whose stdout is kept too (in ``<name>.out``)."""

    def start(self) -> CanaryWorker:
        env = self.merged_env()
        with self.log_path.open("wb") as log, self.out_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "run", "--app", self.app, "--config", str(self.config), *self.args],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=log,
            )
        return self

    @property
    def out_path(self) -> Path:
        return self.log_path.with_suffix(".out")


@pytest.fixture
def unreachable_port() -> Iterator[int]:
    with closed_port() as port:
        yield port


def settings(tmp_path: Path, how: str, http_port: int, spark_port: int) -> tuple[Path, tuple[str, ...]]:
    """The settings file (host.json with logging at Debug, the SDKs' loggers too when ``how`` says so; or host.yaml
    and ``--log-level DEBUG``) and the arguments of ``worker run``."""
    config: dict[str, Any] = {
        "version": "2.0",
        "extensions": {"queues": {"maxPollingInterval": "00:00:00.200", "maxDequeueCount": 2, "batchSize": 4}},
        "worker": {"httpPort": http_port},
        "spark": {"master": f"sc://127.0.0.1:{spark_port}/;token={SPARK_TOKEN}", "startTimeout": "3s"},
    }
    if how.startswith("host.json"):
        config["logging"] = {"logLevel": {"default": "Debug"}}
        if how == "host.json naming the SDKs":  # their lines are then written, and must pass the redaction
            config["logging"]["logLevel"] |= dict.fromkeys(SDKS, "Debug")
        path = tmp_path / "host.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        return path, ()
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path, ("--log-level", "DEBUG")


@pytest.mark.parametrize("how", ["host.json", "--log-level", "host.json naming the SDKs"])
async def test_no_canary_leaves_through_any_channel(
    how: str,
    tmp_path: Path,
    azurite: Azurite,
    moto_server: Moto,
    oci_server: OciTestServer,
    otlp_receiver: Receiver,
    unreachable_port: int,
) -> None:
    http_port = free_port()
    config, args = settings(tmp_path, how, http_port, unreachable_port)
    unreachable = (
        f"QueueEndpoint=http://canary:{URL_PASSWORD}@127.0.0.1:{unreachable_port}/{ACCOUNT};"
        f"SharedAccessSignature=sv=2022-11-02&ss=q&srt=sco&sp=rwdlacup&sig={SAS_SIG}"
    )
    env = {
        "CanaryAzure": azurite.connection_string,
        "CanarySqs": moto_server.connection(),
        "CanaryOci": oci_connection(oci_server) + "&poison=host",
        "CanaryUnreachable": unreachable,
        "CANARY_FAILURE": FAILURE,
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_SESSION_TOKEN": AWS_SESSION,
        "WORKER_HTTP_TOKEN": ENDPOINT_TOKEN,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    azure = open_backend(azurite.connection_string, tmp_path)
    sqs = open_backend(moto_server.connection(), tmp_path)
    oci = open_backend(oci_connection(oci_server), tmp_path)
    try:
        for backend, queue in (
            (azure, "canary-azure"),
            (azure, "canary-spark"),
            (sqs, "canary-sqs"),
            (oci, "canary-oci"),
            (oci, "canary-oci-poison"),
        ):
            await backend.create_queue(queue)
        worker = CanaryWorker(config, env, app=APP, args=args).start()
        try:
            worker.wait_for_log("host started", 60)
            await azure.put("canary-azure", encode("fails twice", "base64"))
            await sqs.put("canary-sqs", encode("counted", "base64"))
            await oci.put("canary-oci", encode("signed", "base64"))

            def state() -> dict[str, Any] | None:
                status, _, body = fetch(http_port, "/console/api/state", token=ENDPOINT_TOKEN)
                found = json.loads(body) if status == 200 else None
                done = (
                    found
                    and len(found["failures"]) >= 2
                    and all(f["totals"]["succeeded"] >= 1 for f in found["functions"] if f["name"] in ("counted", "signed"))
                )
                return found if done else None

            console = poll(state, 60, what="two failures and a message each on SQS and OCI handled")
            worker.wait_for_log("Spark did not start", 60)

            def not_ready() -> str | None:
                status, _, body = fetch(http_port, "/readyz")
                return body if status == 503 and f"127.0.0.1:{unreachable_port}" in body else None

            readyz = poll(not_ready, 60, what="/readyz to name the unreachable storage")
            answers = {
                path: fetch(http_port, path, token=ENDPOINT_TOKEN)[2]
                for path in ("/metrics", "/leases", "/console/api/history", "/healthz")
            }
            answers["/console/api/state"] = json.dumps(console)
            answers["/readyz"] = readyz
            assert worker.stop(signal.SIGTERM) == 0
        finally:
            worker.kill()
    finally:
        await azure.close()
        await sqs.close()
        await oci.close()

    spans = otlp_receiver.wait_for(lambda got: any(s.status[0] == "ERROR" and s.name == "process canary-azure" for s in got))
    log, out = worker.log_path.read_text(encoding="utf-8"), worker.out_path.read_text(encoding="utf-8")

    # OCI's canary is the test server's private key, which the worker signed every call with.
    key = oci_server.config_file.parent / "oci_api_key.pem"
    key_lines = key.read_text(encoding="utf-8").splitlines()
    canaries = {**CANARIES, "OCI private key": "".join(key_lines[1:-1]), "OCI private key line": key_lines[1]}
    channels = {"log (stderr)": log, "stdout": out, "spans": repr(spans), **answers}
    # Any file the worker wrote beside its settings (.worker/: Spark's log, the embedded store) is a channel too.
    channels |= {
        str(path): path.read_text(encoding="utf-8", errors="replace")
        for path in (tmp_path / ".worker").rglob("*")
        if path.is_file()
    }
    leaked = {channel: found for channel, text in channels.items() if (found := leaks(text, canaries))}
    assert not leaked, f"canaries leaked: {leaked}"
    # Each channel carried the text that held a canary, redacted.
    assert "sig=***" in json.dumps(console["failures"]), console["failures"]
    assert f"sc://127.0.0.1:{unreachable_port}/;token=***" in json.dumps(console["facts"]["settings"])
    assert f"http://canary:***@127.0.0.1:{unreachable_port}" in readyz, readyz
    assert 'function="counted"' in answers["/metrics"]
    failed = [s for s in spans if s.status[0] == "ERROR" and s.name == "process canary-azure"]
    assert "sig=***" in failed[0].status[1], failed[0]
    assert f"sc://127.0.0.1:{unreachable_port}/;token=***" in log
    assert "sig=***" in log and "succeeded" in out
    sdk_lines = [line for line in worker.lines() if str(line.get("logger", "")).startswith(SDKS)]
    if how == "host.json naming the SDKs":  # the SDKs' own requests, headers and signatures: written, redacted
        assert {"botocore", "oci", "azure"} <= {line["logger"].split(".")[0] for line in sdk_lines}
        assert "'X-Amz-Security-Token': b'***'" in log
        # A SigV4 signature is no canary (each request has its own) but as good as the key for that request.
        assert "Signature:\\n***" in log and not re.search(r"Signature[=:](\\n|\s)*[0-9a-f]{64}", log)
    else:
        assert not [line for line in sdk_lines if line["level"] in ("debug", "info")], sdk_lines[:3]


@pytest.mark.parametrize("command", [("peek", "work"), ("send", "work", "hello"), ("queues",)])
def test_cli_errors_naming_storage_hold_no_canary(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Storage that does not answer, at an endpoint URL with a password and a SAS: the command's error names the
    endpoint, without either."""
    with closed_port() as port:
        connection = (
            f"QueueEndpoint=http://canary:{URL_PASSWORD}@127.0.0.1:{port}/{ACCOUNT};"
            f"SharedAccessSignature=sv=2022-11-02&ss=q&sig={SAS_SIG}"
        )
        ran = subprocess.run(
            [sys.executable, "-m", "worker", *command],
            cwd=tmp_path,
            env=worker_environment(AzureWebJobsStorage=connection, AWS_SESSION_TOKEN=AWS_SESSION),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert ran.returncode == 1, ran.stderr
    assert f"worker {command[0]}: error: storage http://canary:***@127.0.0.1:{port}/{ACCOUNT} unreachable" in ran.stderr
    assert not leaks(ran.stdout + ran.stderr), ran.stderr


def test_cli_errors_hold_no_canary(tmp_path: Path) -> None:
    """A SAS in both the endpoint URL and SharedAccessSignature: refused at start in one line (exit 2), naming the
    problem and neither SAS."""
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    connection = (
        f"QueueEndpoint=http://127.0.0.1:1/{ACCOUNT}?sv=2022-11-02&sig={SAS_SIG};"
        f"SharedAccessSignature=sv=2022-11-02&sig={SAS_SIG}"
    )
    ran = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--app", "tests.apps.recording:app", "--no-supervisor"],
        cwd=tmp_path,
        env=worker_environment(AzureWebJobsStorage=connection, RECORD_DB="unused"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 2, ran.stderr
    refusal = [line for line in ran.stderr.splitlines() if "SAS" in line]
    assert len(refusal) == 1 and "a SAS both in SharedAccessSignature and in its QueueEndpoint URL" in refusal[0]
    assert "Traceback" not in ran.stderr
    assert not leaks(ran.stdout + ran.stderr), ran.stderr
