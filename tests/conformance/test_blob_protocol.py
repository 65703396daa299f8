"""The blob store protocol, written once and run on the embedded folder store and on Azurite's blob service."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import free_port
from worker.backends.blobs import BlobStore, InvalidBlobName
from worker.backends.embedded.blobs import LocalBlobStore
from worker.backends.queues import TransientError
from worker.backends.registry import open_blob_store

KINDS = ["local", "azurite"]


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "azurite":
        connection = request.getfixturevalue("azurite").connection_string
    else:
        connection = "sqlite:///.worker/queues.sqlite3"
    opened = open_blob_store(connection, tmp_path)
    yield opened
    await opened.close()


@pytest.fixture
def container() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(
    "data",
    [b"", "héllo wörld".encode(), bytes(range(256)), os.urandom(5 * 1024 * 1024)],
    ids=["empty", "utf8", "binary", "5MB"],
)
async def test_what_is_written_is_read_back_byte_for_byte(store: BlobStore, container: str, data: bytes) -> None:
    await store.write(container, "dir/sub/blob.bin", data)

    blob = await store.read(container, "dir/sub/blob.bin")

    assert blob is not None
    assert blob.data == data
    assert (blob.container, blob.path, blob.name, blob.length) == (
        container,
        "dir/sub/blob.bin",
        f"{container}/dir/sub/blob.bin",
        len(data),
    )
    assert blob.uri.endswith(f"{container}/dir/sub/blob.bin")


async def test_a_blob_url_the_store_gave_locates_its_blob_and_another_stores_url_is_refused(
    store: BlobStore, container: str
) -> None:
    await store.write(container, "in dir/ünïcode name.txt", b"x")
    blob = await store.read(container, "in dir/ünïcode name.txt")
    assert blob is not None

    assert store.locate(blob.uri) == (container, "in dir/ünïcode name.txt")
    assert store.locate(blob.uri + "?sv=2024&sig=c2VjcmV0") == (container, "in dir/ünïcode name.txt")  # a SAS: no matter
    for foreign in (
        "https://another.blob.core.windows.net/" + container + "/x.txt",
        "file:///elsewhere/" + container + "/x.txt",
    ):
        with pytest.raises(InvalidBlobName, match="is not in"):
            store.locate(foreign)
    with pytest.raises(InvalidBlobName, match="container name"):
        store.locate(blob.uri.replace(container, "UPPER", 1))


async def test_a_missing_blob_or_container_reads_as_none(store: BlobStore, container: str) -> None:
    assert await store.read(container, "nothing.txt") is None
    await store.write(container, "something.txt", b"x")
    assert await store.read(container, "nothing.txt") is None


async def test_a_write_replaces_the_blob(store: BlobStore, container: str) -> None:
    await store.write(container, "a.txt", b"first, and longer")
    await store.write(container, "a.txt", b"second")

    blob = await store.read(container, "a.txt")
    assert blob is not None and blob.data == b"second"


async def test_list_is_sorted_and_filtered_by_prefix(store: BlobStore, container: str) -> None:
    assert await store.list(container) == []
    for path in ("b/2.txt", "a.txt", "b/1.txt", "c/deep/er.txt"):
        await store.write(container, path, path.encode())

    assert await store.list(container) == ["a.txt", "b/1.txt", "b/2.txt", "c/deep/er.txt"]
    assert await store.list(container, "b/") == ["b/1.txt", "b/2.txt"]


async def test_delete_removes_and_a_missing_blob_is_fine(store: BlobStore, container: str) -> None:
    await store.write(container, "gone.txt", b"x")
    await store.delete(container, "gone.txt")
    await store.delete(container, "gone.txt")
    await store.delete(f"{container}-none", "never.txt")
    assert await store.read(container, "gone.txt") is None


@pytest.mark.parametrize("name", ["ab", "UPPER", "has_underscore", "double--hyphen", "-start", "x" * 64])
async def test_container_names_azure_refuses_are_refused_before_any_request(store: BlobStore, name: str) -> None:
    with pytest.raises(InvalidBlobName, match="container name"):
        await store.write(name, "a.txt", b"x")
    with pytest.raises(InvalidBlobName):
        await store.read(name, "a.txt")


@pytest.mark.parametrize("path", ["", "../escape.txt", "a/../../b", "/absolute", "a//b", "back\\slash", "x" * 1025])
async def test_blob_names_that_escape_or_are_empty_are_refused(store: BlobStore, container: str, path: str) -> None:
    with pytest.raises(InvalidBlobName):
        await store.write(container, path, b"x")


async def test_concurrent_writers_never_leave_a_torn_blob(store: BlobStore, container: str) -> None:
    versions = [bytes([n]) * 256 * 1024 for n in range(8)]
    await asyncio.gather(*(store.write(container, "contended.bin", v) for v in versions))
    reads = await asyncio.gather(*(store.read(container, "contended.bin") for _ in range(4)))
    for blob in reads:
        assert blob is not None and blob.data in versions


async def test_a_store_that_cannot_be_reached_raises_transient_naming_the_endpoint(container: str, tmp_path: Path) -> None:
    port = free_port()
    store = open_blob_store(
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={_key()};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;",
        tmp_path,
    )
    try:
        with pytest.raises(TransientError, match=rf"127\.0\.0\.1:{port}.*connection refused"):
            await store.write(container, "a.txt", b"x")
    finally:
        await store.close()


async def test_a_write_cut_short_by_a_crash_is_invisible(tmp_path: Path, container: str) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    await store.write(container, "done.txt", b"whole")
    (tmp_path / "blobs" / container / ".tmp-abc123").write_bytes(b"half of a bl")  # what a kill -9 mid-write leaves

    assert await store.list(container) == ["done.txt"]
    blob = await store.read(container, "done.txt")
    assert blob is not None and blob.data == b"whole"


async def test_the_embedded_store_lives_beside_the_queue_file(tmp_path: Path, container: str) -> None:
    store = open_blob_store("sqlite:///.worker/queues.sqlite3", tmp_path)
    await store.write(container, "x/y.txt", b"here")
    assert (tmp_path / ".worker" / "blobs" / container / "x" / "y.txt").read_bytes() == b"here"


def _key() -> str:
    from tests.azurite import KEY

    return KEY
