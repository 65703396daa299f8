"""Azure Blob Storage behind the blob store protocol, on the SDK's asyncio client.

It signs in and sets up HTTP as the queue backend does.
A failed blob read or write fails the attempt, and the message is retried.
So the SDK's own retries stay short: a few attempts, then :class:`~worker.backends.queues.TransientError`.
"""

from __future__ import annotations

from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import BlobServiceClient, LinearRetry

from worker.backends.azure.connection import AzureConnection
from worker.backends.azure.errors import (
    READ_TIMEOUT,
    Transport,
    describe_failure,
    env_settings_wanted,
    is_transient,
)
from worker.backends.blobs import (
    BlobData,
    BlobError,
    InvalidBlobName,
    check_container,
    check_names,
    locate_in,
    without_query,
)
from worker.backends.failures import CONNECT_TIMEOUT, ConnectionStringError
from worker.backends.queues import TransientError

#: Attempts of one blob call (the first and its retries) before it fails the invocation's attempt, and the wait between.
ATTEMPTS = 3
RETRY_WAIT = 0.5


class AzureBlobStore:
    """Blobs of one storage account; implements :class:`worker.backends.blobs.BlobStore`."""

    def __init__(self, connection: AzureConnection) -> None:
        if connection.blob_endpoint is None:
            raise ConnectionStringError("connection string has no BlobEndpoint (nor an AccountName to derive one from)")
        self.connection = connection
        self.endpoint = connection.blob_endpoint
        self._service = BlobServiceClient(
            connection.blob_endpoint,
            credential=connection.credential(),
            # The storage SDK's default waits 15 s and more between attempts; a binding fails its attempt sooner. The
            # SDK annotates whole seconds, but draws the wait with random.uniform, which takes fractions.
            retry_policy=LinearRetry(
                backoff=RETRY_WAIT,  # type: ignore[arg-type]
                retry_total=ATTEMPTS - 1,
                random_jitter_range=RETRY_WAIT / 2,  # type: ignore[arg-type]
            ),
            transport=Transport(
                connection_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, use_env_settings=env_settings_wanted()
            ),
        )

    def describe(self) -> str:
        return self.connection.describe("blob")

    def locate(self, url: str) -> tuple[str, str]:
        """A blob URL of this account: virtual-host style (``https://<account>.blob.core.windows.net/c/b``) or
        path style (Azurite's ``http://127.0.0.1:10000/<account>/c/b``), as its endpoint is."""
        found = locate_in(url, self.endpoint)
        if found is None:
            raise InvalidBlobName(f"blob URL {without_query(url)} is not in this connection's account ({self.endpoint})")
        check_names(*found)
        return found

    def _failed(self, exc: AzureError, action: str, container: str, path: str) -> Exception:
        """The error for an SDK failure: transient ones name the endpoint, others the service's answer."""
        subject = f"blob {container}/{path}"
        if is_transient(exc):
            return TransientError(f"blob storage {self.endpoint} unreachable to {action} {subject}: {describe_failure(exc)}")
        return BlobError(f"blob storage {self.endpoint} refused to {action} {subject}: {describe_failure(exc)}")

    async def read(self, container: str, path: str) -> BlobData | None:
        check_names(container, path)
        client = self._service.get_blob_client(container, path)
        try:
            downloader = await client.download_blob()
            data = await downloader.readall()
        except ResourceNotFoundError:
            return None
        except AzureError as exc:
            raise self._failed(exc, "read", container, path) from None
        return BlobData(container, path, data, client.url)

    async def write(self, container: str, path: str, data: bytes) -> None:
        check_names(container, path)
        client = self._service.get_blob_client(container, path)
        try:
            try:
                await client.upload_blob(data, overwrite=True)
            except ResourceNotFoundError:  # the container: create it, then write once more
                try:
                    await self._service.create_container(container)
                except ResourceExistsError:
                    pass
                await client.upload_blob(data, overwrite=True)
        except AzureError as exc:
            raise self._failed(exc, "write", container, path) from None

    async def delete(self, container: str, path: str) -> None:
        check_names(container, path)
        try:
            await self._service.get_blob_client(container, path).delete_blob()
        except ResourceNotFoundError:
            return
        except AzureError as exc:
            raise self._failed(exc, "delete", container, path) from None

    async def list(self, container: str, prefix: str = "") -> list[str]:
        check_container(container)
        try:
            names = [
                blob.name
                async for blob in self._service.get_container_client(container).list_blobs(name_starts_with=prefix or None)
            ]
        except ResourceNotFoundError:
            return []
        except HttpResponseError as exc:
            raise self._failed(exc, "list", container, prefix + "*") from None
        except AzureError as exc:
            raise self._failed(exc, "list", container, prefix + "*") from None
        return sorted(names)

    async def close(self) -> None:
        await self._service.close()
        await self.connection.close()
