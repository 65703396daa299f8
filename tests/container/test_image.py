"""deploy/Dockerfile built as shipped with podman, and its image run as a user would run it.

- The shipped image on its own embedded queue: ``/healthz``, ``/readyz``, the worker as a non-root user, the sample
  pipeline (ingest -> aggregate -> report) sent with ``worker send`` inside the container, and exit 0 on
  ``podman stop``.
- Against Azurite on the host (the container on the host's network), with the tests' hold app mounted: ``podman
  stop`` (SIGTERM) drains a running handler and the container exits 0 within the grace deploy/README.md gives
  ``docker run`` / ``podman run`` (``--stop-timeout``); a container killed mid-handler loses no message: the next
  one handles it once the lease has run out.
- The queue-only image (``--build-arg EXTRAS=azure-functions``): neither Java nor PySpark, and it runs an app.

Each test prints what it measured (image sizes, the times to ``/healthz`` and ``/readyz``) under ``pytest -s``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import urllib.error
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.azurite import Azurite
from tests.container.podman import Container, Image, Podman
from tests.deploy.support import HTTP_PORT, documented_stop_timeout
from tests.spark.jvm import BASE_OPTIONS
from tests.support import free_port, get, poll
from worker.backends.registry import open_backend

HOLD_APP = Path(__file__).with_name("hold_app.py")
#: The image's user (the Dockerfile's USER, the Deployment's runAsUser).
WORKER_UID = 10001
#: What the hold app's worker is given: the lease a killed container's message waits out before the next container
#: takes it (short, so that the test waits little), and the drain the deployment files give (30 s).
HOLD_HOST_YAML = """\
version: "1.0"
extensions:
  queues:
    batchSize: 1
    maxPollingInterval: "00:00:01"
worker:
  drainTimeout: "00:00:30"
functions:
  hold:
    leaseDuration: "5s"
"""
#: Longest the shipped image may take to be ready: Spark's JVM starts with it, on two busy cores.
READY_TIMEOUT = 180.0
#: Longest the sample pipeline may take for two small files, from the sends to the report's message deleted.
PIPELINE_TIMEOUT = 300.0
#: Every test here may build an image first: from an empty podman store that downloads PySpark and a JRE.
pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(1800)]


def status(port: int, path: str) -> int:
    """The endpoint's HTTP status, or 0 while nothing answers on the port."""
    try:
        return get(port, path, timeout=2)[0]
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


@contextmanager
def running(container: Container) -> Iterator[Container]:
    """The container until the block ends, then removed; its log joins any failure's message."""
    try:
        yield container
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n--- log of {container.name}:\n{container.logs()}") from failure
    finally:
        container.remove()


def wait_ready(container: Container, port: int, started: float, timeout: float) -> tuple[float, float]:
    """Seconds from ``started`` to ``/healthz``'s first 200 and to ``/readyz``'s; a container that exits fails."""

    def answers(path: str) -> bool:
        if status(port, path) == 200:
            return True
        assert container.state()["Running"], f"the container exited before {path} answered 200"
        return False

    poll(lambda: answers("/healthz"), timeout, interval=0.1, what="/healthz to answer 200")
    healthy = time.monotonic() - started
    poll(lambda: answers("/readyz"), timeout, interval=0.2, what="/readyz to answer 200")
    return healthy, time.monotonic() - started


def stop(containers: Podman, container: Container) -> float:
    """``podman stop`` with the grace the container was started with: exit code 0 within it; the seconds it took."""
    started = time.monotonic()
    containers.run("stop", container.name, timeout=documented_stop_timeout() + 30)
    took = time.monotonic() - started
    code = container.state()["ExitCode"]
    assert code == 0, f"exit code {code} after podman stop"
    assert took < documented_stop_timeout(), f"podman stop took {took:.1f} s: past the grace, killed"
    return took


def queue_count(connection: str, queue: str, folder: Path) -> int:
    """The queue's approximate count as Azurite has it, leased messages included."""

    async def count() -> int:
        backend = open_backend(connection, folder)
        try:
            return await backend.approximate_count(queue)
        finally:
            await backend.close()

    return asyncio.run(count())


def shared_folder(tmp_path: Path) -> Path:
    """The folder the hold app's containers mount at /shared: the app and its host.yaml, the image user's own."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(HOLD_APP, shared / HOLD_APP.name)
    (shared / "host.yaml").write_text(HOLD_HOST_YAML, encoding="utf-8")
    for path in (shared, *shared.iterdir()):
        os.chown(path, WORKER_UID, WORKER_UID)
    return shared


def started_attempts(shared: Path, body: str) -> list[Path]:
    return sorted(shared.glob(f"started-{body}-*"))


def hold_container(containers: Podman, image: Image, shared: Path, azurite: Azurite, queue: str, port: int) -> Container:
    """The hold app on Azurite, in a container on the host's network (Azurite listens on the host's loopback)."""
    return Container(containers).start(
        image,
        "--network=host",
        f"--stop-timeout={documented_stop_timeout()}",
        "--volume",
        f"{shared}:/shared",
        "--env",
        f"AzureWebJobsStorage={azurite.connection_string}",
        "--env",
        f"HOLD_QUEUE={queue}",
        "--env",
        f"WORKER__worker__httpPort={port}",
        args=("run", "--app", "hold_app:app", "--config", "/shared/host.yaml"),
    )


def send(container: Container, queue: str, body: str) -> None:
    """``worker send`` in the container, to the storage its environment names."""
    container.exec("worker", "send", "--config", "/shared/host.yaml", queue, body)


def test_the_image_runs_the_sample_pipeline_as_a_non_root_user_and_stops_with_exit_0(
    containers: Podman, image: Image
) -> None:
    port = free_port()
    started = time.monotonic()
    # Its JVM runs with the compiler and collector every JVM of the suite runs with (tests/spark/jvm.py): a third
    # less CPU for a run of minutes on kilobytes; the image's Java and Spark are what is under test, not their speed.
    container = Container(containers).start(
        image,
        "--publish",
        f"127.0.0.1:{port}:{HTTP_PORT}",
        f"--stop-timeout={documented_stop_timeout()}",
        "--env",
        f"SPARK_SUBMIT_OPTS={BASE_OPTIONS}",
    )
    with running(container):
        healthy, ready = wait_ready(container, port, started, READY_TIMEOUT)
        print(f"\nshipped image {image.size / 1e9:.2f} GB: /healthz after {healthy:.1f} s, /readyz after {ready:.1f} s")

        # worker run, PID 1 (the exec form's ENTRYPOINT) and its processes' parent, runs as the image's user.
        status_lines = dict(line.split(":", 1) for line in container.exec("cat", "/proc/1/status").splitlines())
        assert status_lines["Name"].strip() == "worker"
        assert [int(uid) for uid in status_lines["Uid"].split()] == [WORKER_UID] * 4

        landed = json.loads(
            container.exec("python", "-m", "functions.data", "/data/landing", "--files", "2", "--size-mb", "0.05")
        )
        container.exec("worker", "send", "ingest", *(json.dumps({"path": path}) for path in landed["files"]))

        def finished() -> dict[str, object] | None:
            stats = json.loads(container.exec("worker", "stats", "--json"))
            found = containers.run("exec", container.name, "cat", "/data/warehouse/reports/report.json", check=False)
            if found.returncode != 0 or any(row["messages"] for row in stats):
                return None
            return {"report": json.loads(found.stdout), "stats": stats}

        done = poll(finished, PIPELINE_TIMEOUT, interval=1.0, what="the pipeline to report and empty its queues")
        report, stats = done["report"], done["stats"]
        assert report["files"] == 2 and report["rows_in"] == landed["rows"]
        assert report["rows_out"] == landed["clean"] > 0, report
        assert {row["queue"] for row in stats} == {"ingest", "aggregate", "report"}
        assert not any(row["poison"] for row in stats), stats

        took = stop(containers, container)
        print(f"podman stop: exit 0 after {took:.1f} s")


def test_stop_drains_a_running_handler_and_exits_0_within_the_documented_grace(
    containers: Podman, image: Image, azurite: Azurite, tmp_path: Path
) -> None:
    shared, queue, port = shared_folder(tmp_path), f"hold-{uuid.uuid4().hex[:8]}", free_port()
    container = hold_container(containers, image, shared, azurite, queue, port)
    with running(container):
        wait_ready(container, port, time.monotonic(), READY_TIMEOUT)
        send(container, queue, "m1")
        poll(lambda: started_attempts(shared, "m1"), 60, what="the handler to start")

        stopping = containers.popen("stop", container.name)
        began = time.monotonic()
        try:
            # SIGTERM started the drain: not ready any more, and podman stop still waits for the held handler.
            poll(lambda: status(port, "/readyz") == 503, 20, what="/readyz to say the worker drains")
            assert stopping.poll() is None, "the container stopped while its handler still ran"
            (shared / "release").touch()
            output, _ = stopping.communicate(timeout=documented_stop_timeout() + 30)
        finally:
            if stopping.poll() is None:
                stopping.kill()
        took = time.monotonic() - began
        assert stopping.returncode == 0, output
        code = container.state()["ExitCode"]
        assert code == 0, f"exit code {code} after the drain"
        assert took < documented_stop_timeout(), f"podman stop took {took:.1f} s: past the grace, killed"
        assert (shared / "done-m1").exists(), "the handler did not finish"
        assert len(started_attempts(shared, "m1")) == 1
        assert queue_count(azurite.connection_string, queue, tmp_path) == 0, "the drained message was not deleted"


def test_a_container_killed_mid_handler_loses_no_message(
    containers: Podman, image: Image, azurite: Azurite, tmp_path: Path
) -> None:
    shared, queue = shared_folder(tmp_path), f"hold-{uuid.uuid4().hex[:8]}"
    port = free_port()
    first = hold_container(containers, image, shared, azurite, queue, port)
    with running(first):
        wait_ready(first, port, time.monotonic(), READY_TIMEOUT)
        send(first, queue, "m1")
        poll(lambda: started_attempts(shared, "m1"), 60, what="the handler to start")
        containers.run("kill", "--signal", "KILL", first.name)
        assert containers.run("wait", first.name).stdout.strip() == "137"
    assert not (shared / "done-m1").exists()

    (shared / "release").touch()
    second = hold_container(containers, image, shared, azurite, queue, free_port())
    with running(second):
        poll(lambda: (shared / "done-m1").exists(), 60, what="the next container to handle the message")
        assert len(started_attempts(shared, "m1")) == 2, "one attempt in each container"
        poll(lambda: queue_count(azurite.connection_string, queue, tmp_path) == 0, 10, what="the message deleted")


def test_the_queue_only_image_has_neither_java_nor_pyspark_and_runs_an_app(
    containers: Podman, image: Image, queue_image: Image, azurite: Azurite, tmp_path: Path
) -> None:
    shared, queue, port = shared_folder(tmp_path), f"hold-{uuid.uuid4().hex[:8]}", free_port()
    (shared / "release").touch()
    started = time.monotonic()
    container = hold_container(containers, queue_image, shared, azurite, queue, port)
    with running(container):
        healthy, ready = wait_ready(container, port, started, READY_TIMEOUT)
        print(
            f"\nqueue-only image {queue_image.size / 1e9:.2f} GB (shipped {image.size / 1e9:.2f} GB): "
            f"/healthz after {healthy:.1f} s, /readyz after {ready:.1f} s"
        )
        probe = "import importlib.util, shutil; print(importlib.util.find_spec('pyspark'), shutil.which('java'))"
        assert container.exec("python", "-c", probe).split() == ["None", "None"]
        send(container, queue, "m1")
        poll(lambda: (shared / "done-m1").exists(), 60, what="the queue-only image to handle a message")
        stop(containers, container)
    # PySpark and the JRE are most of the shipped image.
    assert queue_image.size < image.size / 2, (queue_image.size, image.size)
