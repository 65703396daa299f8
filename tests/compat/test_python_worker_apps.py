"""The Functions Python worker's own queue test apps run unchanged under ``worker run``, on Azurite queue + blob.

The apps (tests/compat/apps, copied unmodified: the v2 ``function_app.py`` ones and the v1 app, a folder per
function with function.json) pair HTTP functions, which put
messages on queues and read blobs back, with queue-triggered functions that
write blobs through blob output bindings. This host runs queue triggers only,
so the test plays the HTTP side: it puts what each ``put_*`` function would
put, waits for the queue-triggered functions to write their blobs, then calls
the app's own ``get_*`` functions on those blobs (as a ``func.InputStream``)
and checks what that repository's ``tests/endtoend/test_queue_functions.py``
asserts of their answers.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.functions.blob import InputStream
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from tests.azurite import Azurite
from tests.host.processes import REPO, WorkerProcess, write_host_yaml
from tests.support import poll

APPS = Path(__file__).resolve().parent / "apps" / "queue_functions_stein"
V1_APP = Path(__file__).resolve().parent / "apps" / "queue_functions"
CONTAINER = "python-worker-tests"
QUEUE_TRIGGERED = {
    "queue_trigger",
    "queue_trigger_message_return",
    "queue_trigger_return",
    "queue_trigger_return_multiple",
    "queue_trigger_untyped",
}


@pytest.fixture
def storage(azurite: Azurite) -> Iterator[tuple[QueueServiceClient, BlobServiceClient]]:
    """Clients on the shared Azurite, emptied first: these apps use fixed queue and blob names."""
    queues = QueueServiceClient.from_connection_string(azurite.connection_string)
    blobs = BlobServiceClient.from_connection_string(azurite.connection_string)
    for queue in queues.list_queues():
        queues.delete_queue(queue.name)
    try:
        blobs.delete_container(CONTAINER)
    except ResourceNotFoundError:
        pass
    yield queues, blobs
    queues.close()
    blobs.close()


def _user_functions(app_dir: Path) -> dict[str, Callable[..., Any]]:
    """The app's functions by name, imported from their files: function_app.py's, or each v1 folder's main.py."""
    if app_dir == V1_APP:
        return {
            folder.name: module_from_file(folder / "main.py", f"v1_{folder.name}").main
            for folder in sorted(app_dir.iterdir())
            if (folder / "function.json").is_file()
        }
    module = module_from_file(app_dir / "function_app.py", f"stein_{abs(hash(app_dir))}")
    functions = module.app.get_functions()
    return {f.get_function_name(): f.get_user_function() for f in functions}


def module_from_file(file: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _put(queues: QueueServiceClient, queue: str, body: bytes) -> None:
    """What the app's put_* HTTP functions do through their queue output: one message, base64 as Functions writes it."""
    import base64

    client = queues.get_queue_client(queue)
    try:
        client.create_queue()
    except ResourceExistsError:
        pass
    client.send_message(base64.b64encode(body).decode("ascii"))


def _blob(blobs: BlobServiceClient, name: str) -> bytes | None:
    try:
        return blobs.get_blob_client(CONTAINER, name).download_blob().readall()
    except ResourceNotFoundError:
        return None


def _stream(blobs: BlobServiceClient, name: str) -> InputStream:
    """The blob as the app's get_* functions receive it from their blob input binding."""
    data = poll(lambda: _blob(blobs, name), 30, what=f"blob {CONTAINER}/{name}")
    return InputStream(data=data, name=f"{CONTAINER}/{name}", length=len(data))


def _request(body: bytes = b"") -> func.HttpRequest:
    return func.HttpRequest(method="GET", url="http://localhost/api/x", body=body)


@pytest.mark.subprocess
@pytest.mark.parametrize("variant", ["typed", "generic", "v1"])
def test_python_worker_queue_apps_run_every_queue_triggered_function(
    variant: str, azurite: Azurite, storage: tuple[QueueServiceClient, BlobServiceClient], tmp_path: Path
) -> None:
    queues, blobs = storage
    app_dir = {"typed": APPS, "generic": APPS / "generic", "v1": V1_APP}[variant]
    functions = _user_functions(app_dir)
    assert QUEUE_TRIGGERED <= set(functions)

    worker = WorkerProcess(
        write_host_yaml(tmp_path),
        name=f"worker-{variant}",
        app=str(V1_APP) if variant == "v1" else "function_app:app",
        env={"AzureWebJobsStorage": azurite.connection_string, "PYTHONPATH": os.pathsep.join([str(app_dir), str(REPO)])},
    ).start()
    try:
        loaded = worker.wait_for_log("host started")
        assert loaded["functions"] == len(QUEUE_TRIGGERED)
        run = {line["function"] for line in worker.lines() if line.get("event") == "function loaded"}
        assert run == QUEUE_TRIGGERED
        not_run = [line for line in worker.lines() if str(line.get("event")).startswith("functions not run")]
        assert [line["count"] for line in not_run] == [len(set(functions) - QUEUE_TRIGGERED)]  # the HTTP ones, once

        # test_queue_basic: put_queue sends the request body to testqueue; get_queue_blob reads what queue_trigger wrote.
        _put(queues, "testqueue", b"test-message")
        info = json.loads(functions["get_queue_blob"](_request(), file=_stream(blobs, "test-queue-blob.txt")))
        message = info["queue"]
        assert message["body"] == "test-message"
        for attr in ("id", "expiration_time", "insertion_time", "time_next_visible", "pop_receipt", "dequeue_count"):
            assert message.get(attr) is not None, attr

        # test_queue_return / test_queue_message_object_return / test_queue_untyped_return.
        for queue, blob, getter, body in (
            ("testqueue-return", "test-queue-blob-return.txt", "get_queue_blob_return", "test-message-return"),
            (
                "testqueue-message-return",
                "test-queue-blob-message-return.txt",
                "get_queue_blob_message_return",
                "test-message-object-return",
            ),
            (
                "testqueue-untyped-return",
                "test-queue-untyped-blob-return.txt",
                "get_queue_untyped_blob_return",
                "test-untyped-return",
            ),
        ):
            _put(queues, queue, body.encode())
            assert functions[getter](_request(), file=_stream(blobs, blob)) == body

        # test_queue_return_multiple: put_queue_return_multiple sends 'one' and 'two'; queue_trigger_return_multiple
        # logs each through the logging module.
        for body in (b"one", b"two"):
            _put(queues, "testqueue-return-multiple", body)

        def logged() -> bool:
            text = worker.log_path.read_text()
            return "trigger on message: one" in text and "trigger on message: two" in text

        poll(logged, 30, what="queue_trigger_return_multiple's log lines")

        def drained() -> bool:
            return all(
                queues.get_queue_client(q.name).get_queue_properties().approximate_message_count == 0
                for q in queues.list_queues()
            )

        poll(drained, 30, what="every queue to be empty")
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
    totals = worker.totals()
    assert totals["succeeded"] == 6 and totals.get("failed", 0) == 0 and totals.get("poisoned", 0) == 0, totals
    assert not [q.name for q in queues.list_queues() if q.name.endswith("-poison")]
