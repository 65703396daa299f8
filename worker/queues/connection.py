"""Azure Storage connection settings, read as Azure Functions reads them.

A connection setting holds either a connection string (``UseDevelopmentStorage=true``;
account name and key; a SAS; an explicit ``QueueEndpoint=``) or, for
identity-based connections, nothing: then ``<name>__queueServiceUri`` (or
``<name>__serviceUri`` / ``<name>__accountName``) names the account and
DefaultAzureCredential signs in, with ``<name>__clientId`` choosing a
user-assigned managed identity. Such a setting is turned into the connection
string ``QueueEndpoint=<uri>;Credential=DefaultAzureCredential[;ClientId=<id>]``,
which may also be written directly.

Nothing here puts a secret into a message: errors name the keys, never values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The emulator's well-known account (public, documented by Microsoft).
DEV_ACCOUNT = "devstoreaccount1"
DEV_ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_QUEUE_ENDPOINT = f"http://127.0.0.1:10001/{DEV_ACCOUNT}"

IDENTITY_CREDENTIAL = "DefaultAzureCredential"


class ConnectionStringError(ValueError):
    """A connection string that cannot be used; the message names keys only."""


@dataclass
class AzureConnection:
    """Where the queues are and how to sign in. Secrets stay out of ``repr``."""

    queue_endpoint: str
    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    identity_client_id: str | None = None
    use_identity: bool = False
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

    def describe(self) -> str:
        """For logs: the endpoint and the kind of credential, never the credential."""
        kind = (
            "managed identity" if self.use_identity
            else "account key" if self.account_key
            else "SAS" if self.sas_token
            else "anonymous"
        )
        return f"Azure Storage {self.queue_endpoint} ({kind})"


def parse_connection_string(text: str) -> AzureConnection:
    """An :class:`AzureConnection` from a connection string in any form Functions accepts."""
    settings: dict[str, str] = {}
    for part in text.strip().strip(";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ConnectionStringError("connection string is malformed: expected Key=Value pairs separated by ';'")
        settings[key.strip().lower()] = value.strip()
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        proxy = settings.get("developmentstorageproxyuri")
        endpoint = f"{proxy.rstrip('/')}/{DEV_ACCOUNT}" if proxy else DEV_QUEUE_ENDPOINT
        return AzureConnection(endpoint, DEV_ACCOUNT, DEV_ACCOUNT_KEY)
    name = settings.get("accountname")
    endpoint = settings.get("queueendpoint")
    if not endpoint:
        if not name:
            raise ConnectionStringError("connection string has neither QueueEndpoint nor AccountName")
        protocol = settings.get("defaultendpointsprotocol", "https")
        suffix = settings.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{name}.queue.{suffix}"
    if settings.get("credential", "").lower() == IDENTITY_CREDENTIAL.lower():
        return AzureConnection(endpoint, name, use_identity=True, identity_client_id=settings.get("clientid"))
    key = settings.get("accountkey")
    sas = settings.get("sharedaccesssignature")
    if key and not name:
        raise ConnectionStringError("connection string has AccountKey but no AccountName")
    if not key and not sas:
        raise ConnectionStringError("connection string has no AccountKey, SharedAccessSignature or Credential")
    return AzureConnection(endpoint, name, key, sas.lstrip("?") if sas else None)


def identity_connection(name: str, settings: Mapping[str, str]) -> str | None:
    """The connection string for an identity-based connection ``name``, from ``<name>__*`` settings, or None."""
    prefix = f"{name}__"
    values = {k[len(prefix):].lower(): v for k, v in settings.items() if k.startswith(prefix) and v}
    endpoint = values.get("queueserviceuri") or values.get("serviceuri")
    if not endpoint and values.get("accountname"):
        endpoint = f"https://{values['accountname']}.queue.core.windows.net"
    if not endpoint:
        return None
    text = f"QueueEndpoint={endpoint};Credential={IDENTITY_CREDENTIAL}"
    if values.get("clientid"):
        text += f";ClientId={values['clientid']}"
    return text
