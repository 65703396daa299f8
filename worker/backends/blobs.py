"""The blob store protocol behind blob bindings, with the names and limits of Azure Blob Storage.

Bindings never talk to an SDK; the embedded store and Azure Blob Storage implement this protocol.
One conformance suite (``tests/conformance``) holds both to it.
Names are checked alike on both, so a path that works on a laptop works on Azure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

#: Azure's container name rule: 3-63 lowercase letters, digits and single hyphens, alphanumeric at both ends.
CONTAINER_NAME = re.compile(r"(?=.{3,63}\Z)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]")
#: Longest blob name Azure accepts.
MAX_BLOB_NAME = 1024


class BlobError(Exception):
    """Base of the errors a blob store raises on purpose."""


class InvalidBlobName(BlobError, ValueError):
    """A container or blob name the service would refuse (checked before any request)."""


@dataclass(frozen=True, slots=True)
class BlobData:
    """A blob as read: its bytes and where it lives."""

    container: str
    path: str
    data: bytes
    uri: str

    @property
    def name(self) -> str:
        """``container/path``, as ``azure.functions.InputStream.name`` gives it."""
        return f"{self.container}/{self.path}"

    @property
    def length(self) -> int:
        return len(self.data)


def check_container(container: str) -> None:
    """Raise InvalidBlobName unless Azure accepts ``container`` as a container name."""
    if not CONTAINER_NAME.fullmatch(container):
        raise InvalidBlobName(
            f"container name {container!r} is not valid: use 3-63 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )


def check_names(container: str, path: str) -> None:
    """Raise InvalidBlobName unless Azure accepts ``container`` and ``path`` (and a directory can hold them)."""
    check_container(container)
    if not path or len(path) > MAX_BLOB_NAME:
        raise InvalidBlobName(f"blob name must be 1 to {MAX_BLOB_NAME} characters, got {len(path)}")
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in parts):
        raise InvalidBlobName(
            f"blob name {path!r} is not valid here: no empty, '.' or '..' segments, no leading '/', no backslash"
        )


def locate_in(url: str, base: str) -> tuple[str, str] | None:
    """The container and blob name an absolute blob URL gives under ``base``, a store's own URL (scheme, host and,
    for path-style endpoints such as Azurite's, the account's path); None when the URL is not under it.

    Names come back decoded (``%20`` is a space), as the service reads them; a query (a SAS) is left out.
    """
    parts, root = urlsplit(url), urlsplit(base)
    if (parts.scheme.lower(), parts.netloc.lower()) != (root.scheme.lower(), root.netloc.lower()):
        return None
    prefix = root.path.rstrip("/") + "/"
    if not parts.path.startswith(prefix):
        return None
    container, _, path = parts.path[len(prefix) :].partition("/")
    return unquote(container), unquote(path)


def without_query(url: str) -> str:
    """``url`` for a message: its query, which may hold a SAS token, left out."""
    return urlsplit(url)._replace(query="", fragment="").geturl()


class BlobStore(Protocol):
    """One storage account's blobs (or one folder of them on disk)."""

    async def read(self, container: str, path: str) -> BlobData | None:
        """The blob, or None when it (or its container) does not exist."""

    async def write(self, container: str, path: str, data: bytes) -> None:
        """Create or replace the blob, creating the container when it is missing; readers see old or new, whole."""

    async def delete(self, container: str, path: str) -> None:
        """Delete the blob; a missing one is not an error."""

    async def list(self, container: str, prefix: str = "") -> list[str]:
        """Paths of the container's blobs starting with ``prefix``, sorted; [] for a missing container."""

    def locate(self, url: str) -> tuple[str, str]:
        """The container and blob name one of this store's blob URLs (a ``BlobData.uri``) names.

        InvalidBlobName when the URL is not this store's (another account, another folder) or its names are
        not valid: no attempt could use it.
        """

    def describe(self) -> str:
        """For logs: the kind of store and where it is, never a secret."""

    async def close(self) -> None:
        """Release connections; the store is not used afterwards."""
