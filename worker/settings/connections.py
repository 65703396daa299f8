"""Connection settings resolved as Azure Functions resolves them (the WebJobs SDK's GetWebJobsConnectionStringSection).

``connection="X"`` looks up ``AzureWebJobsX``, then ``X``: the environment, then host.yaml's ``connections:``.
A value is a connection string; a section of ``X__<key>`` settings is an identity-based connection.
A Functions binding without a connection uses ``AzureWebJobsStorage``.
A named connection that resolves to nothing is an error with Functions' own message.
Only a WorkerApp binding naming no connection falls back, to the embedded queue, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from worker.backends.azure.connection import IDENTITY_CREDENTIAL

Service = Literal["queue", "blob"]
#: What Functions prefixes a connection name with for its first lookup.
PREFIX = "AzureWebJobs"
#: The connection a binding without one uses: ``Storage``, looked up as ``AzureWebJobsStorage`` first.
STORAGE = "Storage"
DEFAULT = PREFIX + STORAGE
#: The only ``__credential`` value Functions gives a meaning to.
MANAGED_IDENTITY = "managedidentity"


class ConnectionSettingError(ValueError):
    """A connection setting is missing or cannot be used; the message names settings, never values."""


class MissingConnection(ConnectionSettingError):
    """No setting holds the connection (Functions' InvalidOperationException at start)."""


@dataclass(frozen=True, slots=True)
class ResolvedConnection:
    """Where a connection was found and what it is."""

    #: The setting that matched: ``AzureWebJobsStorage``, ``ConnectionStrings__Orders``, ``Orders__queueServiceUri`` ...
    setting: str
    #: The connection string for the service; None when the embedded default was chosen.
    value: str | None
    #: "environment", "host.yaml", or "default" for the embedded fall-back.
    source: str
    #: True when a WorkerApp binding without a connection fell back to the embedded queue.
    embedded_default: bool = False


def resolve(
    name: str | None,
    service: Service,
    *,
    environ: Mapping[str, str],
    connections: Mapping[str, str],
    embedded_default: bool = False,
) -> ResolvedConnection:
    """Resolve the connection ``name`` for ``service`` ("queue" or "blob").

    ``name`` None or empty means ``AzureWebJobsStorage``; with
    ``embedded_default`` (a WorkerApp binding that names no connection) an
    unset ``AzureWebJobsStorage`` means the embedded queue instead of an error.
    """
    sources = (("environment", environ), ("host.yaml", connections))
    key = name or STORAGE
    for candidate in _candidates(key):
        # As in .NET's layered configuration: a value anywhere beats a section; the environment beats host.yaml.
        for setting in (f"ConnectionStrings__{candidate}", candidate):
            for source, settings in sources:
                if value := settings.get(setting):
                    return ResolvedConnection(setting, value, source)
        from_env, from_yaml = _section(candidate, environ), _section(candidate, connections)
        if from_env or from_yaml:
            source = "environment" if from_env else "host.yaml"
            section = {**from_yaml, **from_env}
            return ResolvedConnection(f"{candidate}__*", _identity(candidate, section, service), source)
    if not name and embedded_default:
        return ResolvedConnection(DEFAULT, None, "default", embedded_default=True)
    empty = _empty_settings(key, sources)
    raise MissingConnection(
        f"Storage account connection string '{_prefixed(key)}' does not exist. Make sure that it is a defined App Setting."
        + (f" Found set but empty: {', '.join(empty)}." if empty else "")
    )


def _empty_settings(key: str, sources: tuple[tuple[str, Mapping[str, str]], ...]) -> list[str]:
    """The settings of connection ``key`` that are there but empty: what a user who set one believes is set."""
    found: set[str] = set()
    for candidate in _candidates(key):
        names = {f"ConnectionStrings__{candidate}".lower(), candidate.lower()}
        section = f"{candidate}__".lower()
        for _, settings in sources:
            found |= {
                name
                for name, value in settings.items()
                if not value.strip() and (name.lower() in names or name.lower().startswith(section))
            }
    return sorted(found)


def _candidates(name: str) -> tuple[str, str]:
    """``AzureWebJobsX`` then ``X``, as the SDK looks them up."""
    return PREFIX + name, name


def _prefixed(name: str) -> str:
    """The name Functions' message gives: ``AzureWebJobsX``; a name that already has the prefix is named as it is.

    (Functions would print ``AzureWebJobsAzureWebJobsStorage`` for a missing
    ``connection="AzureWebJobsStorage"``; the setting a user must define is ``AzureWebJobsStorage``.)
    """
    return name if name.startswith(PREFIX) else PREFIX + name


def _section(name: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The ``<name>__<key>`` settings, keys lower-cased (app settings are case-insensitive in Functions)."""
    prefix = f"{name}__".lower()
    return {k[len(prefix) :].lower(): v for k, v in settings.items() if k.lower().startswith(prefix) and v}


def _identity(name: str, section: Mapping[str, str], service: Service) -> str:
    """The connection string of an identity-based section, for ``service``."""
    credential = section.get("credential")
    if credential is not None and credential.strip().lower() != MANAGED_IDENTITY:
        raise ConnectionSettingError(
            f"{name}__credential must be 'managedidentity' (or unset for the default credential chain), got another value"
        )
    endpoint = section.get(f"{service}serviceuri") or section.get("serviceuri")
    if not endpoint and section.get("accountname"):
        endpoint = f"https://{section['accountname']}.{service}.core.windows.net"
    if not endpoint:
        raise ConnectionSettingError(
            f"identity-based connection {name} has no endpoint for the {service} service: set "
            f"{name}__{service}ServiceUri (or {name}__serviceUri, or {name}__accountName)"
        )
    key = "QueueEndpoint" if service == "queue" else "BlobEndpoint"
    text = f"{key}={endpoint};Credential={IDENTITY_CREDENTIAL}"
    if section.get("clientid"):
        text += f";ClientId={section['clientid']}"
    return text
