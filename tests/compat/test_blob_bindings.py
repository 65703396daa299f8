"""Blob input and output bindings in a running host, on the embedded store and on Azurite's blob service.

Each test runs a Host on the test's event loop with a WorkerApp or an
``azure.functions.FunctionApp`` whose handlers record what they received, and
reads the blobs back through a second store, as another process would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from tests.azurite import Azurite
from tests.compat.test_function_app import put
from tests.reliability.faultproxy import Fault, FaultProxy, FaultRates
from tests.support import apoll, running
from worker import InputStream, Out, QueueMessage, WorkerApp
from worker.backends.blobs import BlobStore
from worker.backends.queues import QueueBackend, QueueNotFound
from worker.backends.registry import open_backend, open_blob_store
from worker.compat.functions import from_function_app
from worker.settings.config import HostConfig

EMBEDDED = "sqlite:///.worker/queues.sqlite3"


@pytest.fixture
def storage_connection(backend_kind: str, request: pytest.FixtureRequest) -> str:
    """The connection string of the storage under test: the embedded queue (and its blob folder) or Azurite."""
    if backend_kind == "azurite":
        return request.getfixturevalue("azurite").connection_string
    return EMBEDDED


@pytest.fixture
def config(tmp_path: Path, storage_connection: str) -> HostConfig:
    return HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        new_batch_threshold=8,
        drain_timeout=1,
        max_dequeue_count=3,
        connections={"AzureWebJobsStorage": storage_connection},
    )


@pytest.fixture
async def queues(storage_connection: str, tmp_path: Path) -> AsyncIterator[QueueBackend]:
    backend = open_backend(storage_connection, tmp_path)
    yield backend
    await backend.close()


@pytest.fixture
async def blobs(storage_connection: str, tmp_path: Path) -> AsyncIterator[BlobStore]:
    store = open_blob_store(storage_connection, tmp_path)
    yield store
    await store.close()


async def count(queues: QueueBackend, queue: str) -> int:
    try:
        return await queues.approximate_count(queue)
    except QueueNotFound:
        return 0


def unique(prefix: str) -> str:
    import uuid

    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_blob_input_gives_the_blob_by_annotation_and_none_when_missing(
    config: HostConfig, queues: QueueBackend, blobs: BlobStore
) -> None:
    queue, container = unique("in"), unique("c")
    await blobs.write(container, "present.txt", "héllo".encode())
    seen: dict[str, list[Any]] = {}
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    @app.blob_input(arg_name="stream", path=container + "/{queueTrigger}", connection="AzureWebJobsStorage")
    @app.blob_input(arg_name="text", path=container + "/{queueTrigger}", connection="AzureWebJobsStorage")
    @app.blob_input(arg_name="raw", path=container + "/{queueTrigger}", connection="AzureWebJobsStorage")
    def read(msg: str, stream: InputStream, text: str, raw: bytes) -> None:
        seen[msg] = [None if stream is None else (stream.read(), stream.name, stream.length), text, raw]

    await put(queues, queue, "present.txt")
    await put(queues, queue, "absent.txt")
    async with running(app, config) as host:
        await apoll(lambda: _now(host.metrics.get("succeeded", "read") == 2), 20, what="both messages")

    assert seen["present.txt"] == [("héllo".encode(), f"{container}/present.txt", 6), "héllo", "héllo".encode()]
    assert seen["absent.txt"] == [None, None, None]


async def test_blob_output_is_written_on_success_only_with_expressions_resolved(
    config: HostConfig, queues: QueueBackend, blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, container = unique("out"), unique("c")
    monkeypatch.setenv("REPORTS_CONTAINER", container)
    app = WorkerApp()

    @app.function_name("report")
    @app.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    @app.blob_output(
        arg_name="out", path="%REPORTS_CONTAINER%/{customer}/{id}-{dequeueCount}.json", connection="AzureWebJobsStorage"
    )
    def report(msg: QueueMessage, out: Out[str]) -> None:
        job = msg.get_json()
        out.set(json.dumps({"total": job["total"]}))
        if job.get("fail"):
            raise RuntimeError("failing after setting the output")

    ok_id = await put(queues, queue, json.dumps({"customer": "acme", "total": 12}))
    await put(queues, queue, json.dumps({"customer": "globex", "total": 1, "fail": True}))
    async with running(app, config) as host:
        await apoll(lambda: _now(host.metrics.get("poisoned", "report") == 1), 20, what="the failing message in poison")
        await apoll(lambda: _now(host.metrics.get("succeeded", "report") == 1), 20, what="the good message")

    assert await blobs.list(container) == [f"acme/{ok_id}-1.json"]
    blob = await blobs.read(container, f"acme/{ok_id}-1.json")
    assert blob is not None and json.loads(blob.data) == {"total": 12}


async def test_function_app_blob_bindings_typed_and_generic_with_return(
    config: HostConfig, queues: QueueBackend, blobs: BlobStore
) -> None:
    queue, container = unique("fa"), unique("c")
    await blobs.write(container, "template.txt", b"Dear {name}")
    fa = func.FunctionApp()

    @fa.function_name("Greet")
    @fa.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    @fa.blob_input(arg_name="template", path=f"{container}/template.txt", connection="AzureWebJobsStorage")
    @fa.generic_output_binding(
        arg_name="copy", type="blob", path=container + "/copies/{name}.bin", connection="AzureWebJobsStorage"
    )
    @fa.blob_output(arg_name="$return", path=container + "/letters/{name}.txt", connection="AzureWebJobsStorage")
    def greet(msg: func.QueueMessage, template: func.InputStream, copy: func.Out[bytes]) -> str:
        assert isinstance(template, func.InputStream)
        copy.set(msg.get_body())
        return template.read().decode().replace("{name}", msg.get_json()["name"])

    converted = from_function_app(fa)
    assert converted.problems == ()
    await put(queues, queue, json.dumps({"name": "ada"}))
    async with running(converted.app, config) as host:
        await apoll(lambda: _now(host.metrics.get("succeeded", "Greet") == 1), 20, what="Greet")

    letter = await blobs.read(container, "letters/ada.txt")
    copy = await blobs.read(container, "copies/ada.bin")
    assert letter is not None and letter.data == b"Dear ada"
    assert copy is not None and json.loads(copy.data) == {"name": "ada"}


async def test_a_path_expression_the_message_cannot_fill_poisons_it_on_the_first_attempt(
    config: HostConfig, queues: QueueBackend, blobs: BlobStore
) -> None:
    queue, container = unique("expr"), unique("c")
    app = WorkerApp()
    calls: list[str] = []

    @app.function_name("named")
    @app.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    @app.blob_output(arg_name="out", path=container + "/{name}.txt", connection="AzureWebJobsStorage")
    def named(msg: str, out: Out[str]) -> None:
        calls.append(msg)
        out.set(msg)

    await put(queues, queue, "not json")
    await put(queues, queue, '{"name": null}')
    async with running(app, config) as host:
        await apoll(lambda: _now(host.metrics.get("poisoned", "named") == 2), 20, what="both messages in poison")
        assert host.metrics.get("retried", "named") == 0

    assert await blobs.list(container) == []
    assert sorted(calls) == sorted(["not json", '{"name": null}'])  # one attempt each: no other could write it


async def test_a_path_that_is_one_expression_takes_a_blob_url_and_another_accounts_url_is_poisoned_at_once(
    config: HostConfig, queues: QueueBackend, blobs: BlobStore
) -> None:
    """The Event Grid -> queue -> blob pattern: the message carries the blob's URL (``{data.url}``)."""
    queue, container = unique("url"), unique("c")
    await blobs.write(container, "images/cat one.png", b"\x89PNG")
    stored = await blobs.read(container, "images/cat one.png")
    assert stored is not None
    seen: dict[int, bytes | None] = {}
    fa = func.FunctionApp()

    @fa.function_name("Thumbnail")
    @fa.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    @fa.blob_input(arg_name="image", path="{data.url}", data_type="binary", connection="AzureWebJobsStorage")
    @fa.blob_output(arg_name="$return", path="{data.url}", connection="AzureWebJobsStorage")
    def thumbnail(msg: func.QueueMessage, image: bytes) -> bytes:
        seen[msg.dequeue_count] = image
        return image + b" seen"

    converted = from_function_app(fa)
    assert converted.problems == ()  # accepted at start
    await put(queues, queue, json.dumps({"data": {"url": stored.uri}}))
    foreign = f"https://elsewhere.blob.core.windows.net/{container}/images/cat.png"
    await put(queues, queue, json.dumps({"data": {"url": foreign}}))
    async with running(converted.app, config) as host:
        await apoll(lambda: _now(host.metrics.get("succeeded", "Thumbnail") == 1), 20, what="the local URL")
        await apoll(lambda: _now(host.metrics.get("poisoned", "Thumbnail") == 1), 20, what="the foreign URL")

    assert seen == {1: b"\x89PNG"}  # the foreign URL never reached the handler, and was not tried again
    written = await blobs.read(container, "images/cat one.png")
    assert written is not None and written.data == b"\x89PNG seen"
    assert host.metrics.get("failed", "Thumbnail") == 0


async def test_a_blob_write_that_storage_fails_fails_the_attempt_and_keeps_the_message(
    azurite: Azurite, tmp_path: Path
) -> None:
    """A fault between the host and Azurite's blob service: the attempt fails, the message stays, the retry writes."""
    proxy = FaultProxy(azurite.blob_port).start()
    try:
        proxy.set_rates(FaultRates({Fault.ERROR_503: 1.0}))
        connection = azurite.connection_string.replace(
            f"BlobEndpoint=http://127.0.0.1:{azurite.blob_port}/", f"BlobEndpoint=http://127.0.0.1:{proxy.port}/"
        )
        assert f":{proxy.port}/" in connection
        config = HostConfig(
            base_dir=tmp_path,
            max_polling_interval=0.2,
            drain_timeout=1,
            max_dequeue_count=5,
            connections={"AzureWebJobsStorage": connection},
        )
        queue, container = unique("fault"), unique("c")
        attempts: list[int] = []
        app = WorkerApp()

        @app.function_name("writer")
        @app.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
        @app.blob_output(arg_name="out", path=container + "/{id}.txt", connection="AzureWebJobsStorage")
        def writer(msg: QueueMessage, out: Out[bytes]) -> None:
            attempts.append(msg.dequeue_count)
            out.set(msg.get_body())

        queues = open_backend(azurite.connection_string, tmp_path)
        direct = open_blob_store(azurite.connection_string, tmp_path)
        try:
            message_id = await put(queues, queue, "payload")
            async with running(app, config) as host:
                await apoll(lambda: _now(host.metrics.get("failed", "writer") >= 1), 30, what="a failed attempt")
                assert await count(queues, queue) == 1  # released for another try, not deleted
                assert await direct.read(container, f"{message_id}.txt") is None
                proxy.set_rates(FaultRates())
                await apoll(lambda: _now(host.metrics.get("succeeded", "writer") == 1), 30, what="the retry")
            blob = await direct.read(container, f"{message_id}.txt")
            assert blob is not None and blob.data == b"payload"
            assert attempts[0] == 1 and attempts[-1] >= 2
            assert await count(queues, queue) == 0
            assert await count(queues, f"{queue}-poison") == 0
        finally:
            await queues.close()
            await direct.close()
    finally:
        proxy.stop()


async def _now(value: Any) -> Any:
    return value
