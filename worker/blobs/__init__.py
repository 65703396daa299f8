"""Blob stores behind one protocol; ``open_blob_store`` picks one from a connection string."""

from __future__ import annotations

from pathlib import Path

from worker.blobs.base import BlobStore
from worker.queues import SQLITE_PREFIX, UnsupportedConnection
from worker.queues.connection import ConnectionStringError, parse_connection_string

#: The folder of blobs beside an embedded queue file: ``.worker/blobs`` for the default ``.worker/queues.sqlite3``.
BLOBS_FOLDER = "blobs"


def open_blob_store(connection: str, base_dir: Path) -> BlobStore:
    """The blob store for ``connection``: beside the embedded queue for ``sqlite:///PATH``, else Azure Blob Storage.

    A relative PATH is taken from ``base_dir`` (host.yaml's folder), as for the
    embedded queue. Raises UnsupportedConnection naming what is missing, never the string itself.
    """
    if connection.startswith(SQLITE_PREFIX):
        from worker.blobs.local import LocalBlobStore

        return LocalBlobStore((base_dir / connection[len(SQLITE_PREFIX):]).parent / BLOBS_FOLDER)
    try:
        parsed = parse_connection_string(connection)
        from worker.blobs.azure import AzureBlobStore

        return AzureBlobStore(parsed)
    except ConnectionStringError as exc:
        raise UnsupportedConnection(str(exc)) from None
