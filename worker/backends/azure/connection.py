"""Azure Storage connection strings, read as Azure Functions reads them.

Forms: ``UseDevelopmentStorage=true``, an account name and key, a SAS, or explicit endpoints.
An identity-based connection (resolved by :mod:`worker.settings.connections`) becomes
``QueueEndpoint=<uri>;Credential=DefaultAzureCredential[;ClientId=<id>]`` (or ``BlobEndpoint=...``).
Errors name keys, never values.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from worker.backends.failures import ConnectionStringError
from worker.backends.queues import AZURE_NAME, AZURE_NAME_RULE, Capabilities, Limits

#: The emulator's well-known account (public, documented by Microsoft).
DEV_ACCOUNT = "devstoreaccount1"
DEV_ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_QUEUE_ENDPOINT = f"http://127.0.0.1:10001/{DEV_ACCOUNT}"
DEV_BLOB_ENDPOINT = f"http://127.0.0.1:10000/{DEV_ACCOUNT}"

IDENTITY_CREDENTIAL = "DefaultAzureCredential"

#: Azure Storage Queues: 32 messages a receive, leases up to 7 days kept to the second, 64 KiB, no long polling.
AZURE_LIMITS = Limits(
    max_batch=32,
    max_visibility=7 * 24 * 3600,
    max_message_bytes=64 * 1024,
    visibility_resolution=1.0,
    long_poll=0.0,
    name_pattern=AZURE_NAME,
    name_rule=AZURE_NAME_RULE,
)
AZURE_CAPABILITIES = Capabilities(
    dead_letter=False,
    peek=True,
    message_options=True,
    creates_queues=True,
    new_receipt_on_update=True,
    updates_content=True,
)


@dataclass
class AzureConnection:
    """Where the queues and blobs are and how to sign in. Secrets stay out of ``repr``.

    A connection string may name one service only (``BlobEndpoint=`` without
    ``QueueEndpoint=``); the other endpoint is then None, and a binding that
    needs it is refused.
    """

    queue_endpoint: str | None
    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    identity_client_id: str | None = None
    use_identity: bool = False
    blob_endpoint: str | None = None
    _identity: Any = field(default=None, repr=False, compare=False)

    def credential(self) -> Any:
        """What the SDK client takes as ``credential``: a named key, a SAS, or DefaultAzureCredential."""
        if self.use_identity:
            try:
                from azure.identity.aio import DefaultAzureCredential
            except ImportError as exc:  # pragma: no cover - azure-identity is a dependency
                raise ConnectionStringError("identity-based connections need the azure-identity package") from exc
            self._identity = DefaultAzureCredential(managed_identity_client_id=self.identity_client_id)
            return self._identity
        if self.account_key and self.account_name:
            from azure.core.credentials import AzureNamedKeyCredential

            return AzureNamedKeyCredential(self.account_name, self.account_key)
        if self.sas_token:
            from azure.core.credentials import AzureSasCredential

            return AzureSasCredential(self.sas_token)
        return None

    async def close(self) -> None:
        if self._identity is not None:
            await self._identity.close()
            self._identity = None

    def describe(self, service: str = "queue") -> str:
        """For logs: the endpoint of ``service`` ("queue" or "blob") and the kind of credential, never the credential."""
        kind = (
            "managed identity"
            if self.use_identity
            else "account key"
            if self.account_key
            else "SAS"
            if self.sas_token
            else "anonymous"
        )
        endpoint = self.blob_endpoint if service == "blob" else self.queue_endpoint
        return f"Azure Storage {endpoint} ({kind})"


def parse_connection_string(text: str) -> AzureConnection:
    """An :class:`AzureConnection` from a connection string in any form Functions accepts."""
    settings = _settings(text)
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        return _development_storage(settings)
    name = settings.get("accountname")
    endpoint, blob = _endpoints(settings, name)
    if settings.get("credential", "").lower() == IDENTITY_CREDENTIAL.lower():
        return _identity_connection(settings, name, endpoint, blob)
    return _signed_connection(settings, name, endpoint, blob)


def _settings(text: str) -> dict[str, str]:
    """The connection string's ``Key=Value`` pairs, keys lower-cased, values stripped."""
    settings: dict[str, str] = {}
    for part in text.strip().strip(";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ConnectionStringError("connection string is malformed: expected Key=Value pairs separated by ';'")
        settings[key.strip().lower()] = value.strip()
    return settings


def _development_storage(settings: dict[str, str]) -> AzureConnection:
    """``UseDevelopmentStorage=true``: the emulator's well-known account, behind its proxy if one is named."""
    proxy = settings.get("developmentstorageproxyuri")
    if proxy:  # the proxy stands for every service of the emulator
        endpoint = blob = f"{proxy.rstrip('/')}/{DEV_ACCOUNT}"
    else:
        endpoint, blob = DEV_QUEUE_ENDPOINT, DEV_BLOB_ENDPOINT
    return AzureConnection(endpoint, DEV_ACCOUNT, DEV_ACCOUNT_KEY, blob_endpoint=blob)


def _endpoints(settings: dict[str, str], name: str | None) -> tuple[str | None, str | None]:
    """The queue and blob endpoints, given or made from the account name; at least one, each an http(s) URL."""
    endpoint = settings.get("queueendpoint")
    blob = settings.get("blobendpoint")
    if name:
        protocol = settings.get("defaultendpointsprotocol", "https")
        suffix = settings.get("endpointsuffix", "core.windows.net")
        endpoint = endpoint or f"{protocol}://{name}.queue.{suffix}"
        blob = blob or f"{protocol}://{name}.blob.{suffix}"
    if not endpoint and not blob:
        raise ConnectionStringError("connection string has neither QueueEndpoint, BlobEndpoint nor AccountName")
    for what, url in _named(endpoint, blob):
        if (parts := urlsplit(url)).scheme not in ("http", "https") or not parts.netloc:
            raise ConnectionStringError(f"connection string's {what} must be an http:// or https:// URL with a host")
    return endpoint, blob


def _named(endpoint: str | None, blob: str | None) -> list[tuple[str, str]]:
    """The endpoints that are given, each with the key that names it in a connection string, queue first."""
    return [(what, url) for what, url in (("QueueEndpoint", endpoint), ("BlobEndpoint", blob)) if url]


def _identity_connection(
    settings: dict[str, str], name: str | None, endpoint: str | None, blob: str | None
) -> AzureConnection:
    """``Credential=DefaultAzureCredential``: a connection that signs in as the identity, over https only."""
    if plain := [url for _, url in _named(endpoint, blob) if urlsplit(url).scheme == "http"]:
        # The SDK refuses a token credential over http (a ValueError at the first client): say so at start.
        raise ConnectionStringError(
            f"identity-based connection to {plain[0]}: an identity's token is sent over https:// only; use the "
            "account's https:// endpoint, or for the storage emulator (Azurite) a connection string with its "
            "account key or a SAS"
        )
    return AzureConnection(
        endpoint, name, use_identity=True, identity_client_id=settings.get("clientid"), blob_endpoint=blob
    )


def _signed_connection(
    settings: dict[str, str], name: str | None, endpoint: str | None, blob: str | None
) -> AzureConnection:
    """A connection whose requests are signed with the account key or carry the SAS, refused where they would fail."""
    key = settings.get("accountkey")
    sas = settings.get("sharedaccesssignature")
    if key and not name:
        raise ConnectionStringError("connection string has AccountKey but no AccountName")
    if not key and not sas:
        raise ConnectionStringError("connection string has no AccountKey, SharedAccessSignature or Credential")
    if key and (signed := [what for what, url in _named(endpoint, blob) if urlsplit(url).password is not None]):
        # Requests are signed in an Authorization header, which the HTTP client refuses beside a URL's credentials.
        raise ConnectionStringError(
            f"connection string's {signed[0]} holds a user and password, which Azure Storage "
            "does not take beside an AccountKey; remove them from the URL"
        )
    if sas and (twice := [what for what, url in _named(endpoint, blob) if "sig=" in urlsplit(url).query.lower()]):
        # The SDK would take both and fail at the first call with a traceback; one of them must go.
        raise ConnectionStringError(
            f"connection string has a SAS both in SharedAccessSignature and in its "
            f"{twice[0]} URL; give it in one place (SharedAccessSignature)"
        )
    if key and not _is_base64(key):  # else every request fails to sign, which looks like storage being down
        raise ConnectionStringError(
            "connection string's AccountKey is not base64 (an account key is base64 text, as the portal and Azurite show it)"
        )
    return AzureConnection(endpoint, name, key, sas.lstrip("?") if sas else None, blob_endpoint=blob)


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True
