"""Storage backends registered by the form of their connection strings.

``sqlite:///PATH`` (or nothing) is the embedded queue; ``oci://`` is OCI Queue; ``sqs://`` is Amazon SQS.
The ``Key=Value;...`` form is Azure Storage; an unknown scheme is refused, never taken for Azure.
Each :class:`BackendKind` states limits and capabilities without opening anything, for start-up checks.
Blob stores open here too. The OCI and SQS SDKs are extras, imported only when such a connection opens.
Without the extra, the connection is refused at start with the install command.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.backends.azure.connection import (
    AZURE_CAPABILITIES,
    AZURE_LIMITS,
    parse_connection_string,
)
from worker.backends.blobs import BlobStore
from worker.backends.embedded.files import queue_files
from worker.backends.embedded.queues import EMBEDDED_CAPABILITIES, EMBEDDED_LIMITS, SqliteBackend, file_problem
from worker.backends.failures import ConnectionStringError
from worker.backends.oci.connection import OCI_CAPABILITIES, OCI_LIMITS, parse_oci_connection
from worker.backends.queues import Capabilities, Limits, QueueBackend
from worker.backends.sqs.connection import SQS_CAPABILITIES, SQS_LIMITS, parse_sqs_connection

#: Where the embedded queue lives when a function names no connection, relative to host.yaml.
DEFAULT_SQLITE_PATH = Path(".worker") / "queues.sqlite3"
SQLITE_PREFIX = "sqlite:///"


class UnsupportedConnection(ValueError):
    """A connection string this host cannot use; the message never contains the string itself."""


OnRetry = Callable[[str], None] | None


@dataclass(frozen=True)
class BackendKind:
    """One kind of queue service: its name in messages, what it accepts, what it can do, and how to open it."""

    name: str
    limits: Limits
    capabilities: Capabilities
    #: Why this connection string cannot be used, or None; checked at start, before anything opens.
    problem: Callable[[str | None, Path], str | None]
    #: A safe description for logs: the service and where it is (a file from the base folder), never a secret.
    describe: Callable[[str | None, Path], str]
    open: Callable[[str | None, Path, OnRetry], QueueBackend]
    #: Whether the host copies this connection's poison to ``<queue>-poison`` (a queue whose name the service must
    #: accept too) rather than leaving it to the service's dead-letter queue.
    host_poison: Callable[[str | None], bool] = lambda _: True
    #: The limits one connection string sets (OCI Queue's ``longPoll=`` and ``maxMessageBytes=``); None where every
    #: connection has the kind's. Raises ConnectionStringError for a string that cannot be parsed.
    connection_limits: Callable[[str | None], Limits] | None = None

    def limits_of(self, connection: str | None) -> Limits:
        """What ``connection`` accepts, before anything opens: the kind's limits as its string sets them."""
        return self.limits if self.connection_limits is None else self.connection_limits(connection)


def _sqlite_path(connection: str | None, base_dir: Path) -> Path:
    """A relative PATH (``sqlite:///queues.db``) is taken from ``base_dir``; an absolute one has four slashes."""
    return (base_dir / (connection[len(SQLITE_PREFIX) :] if connection else DEFAULT_SQLITE_PATH)).absolute()


def _sqlite_describe(connection: str | None, base_dir: Path) -> str:
    """The file's absolute path: which file a worker and a command use is the first thing to compare."""
    return f"embedded queue {_sqlite_path(connection, base_dir)}"


def _sqlite_problem(connection: str | None, base_dir: Path) -> str | None:
    return file_problem(_sqlite_path(connection, base_dir))


def _sqlite_open(connection: str | None, base_dir: Path, on_retry: OnRetry) -> QueueBackend:
    return SqliteBackend(_sqlite_path(connection, base_dir))


def _azure_problem(connection: str | None, base_dir: Path) -> str | None:
    try:
        parsed = parse_connection_string(connection or "")
    except ConnectionStringError as exc:
        return str(exc)
    if parsed.queue_endpoint is None:
        return "connection string has no QueueEndpoint (nor an AccountName to derive one from)"
    return None


def _describer(parse: Callable[[str], Any], service: str) -> Callable[[str | None, Path], str]:
    """``describe`` for a kind whose parsed connection describes itself."""

    def describe(connection: str | None, base_dir: Path) -> str:
        try:
            return str(parse(connection or "").describe())
        except ConnectionStringError:
            return f"{service} (malformed connection string)"

    return describe


def _azure_open(connection: str | None, base_dir: Path, on_retry: OnRetry) -> QueueBackend:
    from worker.backends.azure.queues import AzureBackend

    return AzureBackend(parse_connection_string(connection or ""), on_retry=on_retry)


#: What installs the OCI SDK, an extra so that the embedded queue and Azure Storage install without it.
OCI_INSTALL = "pip install 'queueworker[oci]'"
#: What installs botocore, an extra so that the other backends install without it.
SQS_INSTALL = "pip install 'queueworker[sqs]'"


def _needing(sdk: str, needs: str, install: str, parse: Callable[[str], Any]) -> Callable[[str | None, Path], str | None]:
    """``problem`` for a kind whose SDK is an extra: the SDK is looked up, not imported (it is imported with the
    backend, when a connection opens: :func:`_opening`), then the connection string is read."""

    def problem(connection: str | None, base_dir: Path) -> str | None:
        if importlib.util.find_spec(sdk) is None:
            return f"{needs}, which is not installed: {install}"
        try:
            parse(connection or "")
        except ConnectionStringError as exc:
            return str(exc)
        return None

    return problem


def _opening(module: str, backend: str, parse: Callable[[str], Any]) -> Callable[[str | None, Path, OnRetry], QueueBackend]:
    """``open`` for a kind whose SDK is an extra: its backend's module is imported when a connection opens."""

    def open_(connection: str | None, base_dir: Path, on_retry: OnRetry) -> QueueBackend:
        backend_class = getattr(importlib.import_module(module), backend)
        return backend_class(parse(connection or ""), on_retry=on_retry)  # type: ignore[no-any-return]

    return open_


def _host_poison(parse: Callable[[str], Any]) -> Callable[[str | None], bool]:
    """``host_poison`` for a kind whose connection says where poison goes (``poison=host|service``): the host may
    keep it unless the connection leaves every queue's to the service."""

    def host_poison(connection: str | None) -> bool:
        try:
            return bool(parse(connection or "").poison != "service")
        except ConnectionStringError:  # refused as a connection problem
            return False

    return host_poison


EMBEDDED = BackendKind(
    "embedded queue",
    EMBEDDED_LIMITS,
    EMBEDDED_CAPABILITIES,
    _sqlite_problem,
    _sqlite_describe,
    _sqlite_open,
)
AZURE = BackendKind(
    "Azure Storage",
    AZURE_LIMITS,
    AZURE_CAPABILITIES,
    _azure_problem,
    _describer(parse_connection_string, "Azure Storage"),
    _azure_open,
)
OCI = BackendKind(
    "OCI Queue",
    OCI_LIMITS,
    OCI_CAPABILITIES,
    _needing("oci", "OCI Queue needs the OCI SDK", OCI_INSTALL, parse_oci_connection),
    _describer(parse_oci_connection, "OCI Queue"),
    _opening("worker.backends.oci.queues", "OciBackend", parse_oci_connection),
    _host_poison(parse_oci_connection),
    lambda connection: parse_oci_connection(connection or "").limits,
)
SQS = BackendKind(
    "Amazon SQS",
    SQS_LIMITS,
    SQS_CAPABILITIES,
    _needing("botocore", "Amazon SQS needs botocore", SQS_INSTALL, parse_sqs_connection),
    _describer(parse_sqs_connection, "Amazon SQS"),
    _opening("worker.backends.sqs.queues", "SqsBackend", parse_sqs_connection),
    _host_poison(parse_sqs_connection),
)

#: Every kind of backend, in the order the documentation lists them.
KINDS = (EMBEDDED, AZURE, OCI, SQS)

#: Backends by the scheme their connection strings start with (``scheme://``).
SCHEMES: dict[str, BackendKind] = {"sqlite": EMBEDDED, "oci": OCI, "oci+http": OCI, "sqs": SQS}


def backend_kind(connection: str | None) -> BackendKind:
    """The kind of backend ``connection`` names: by its scheme, or Azure Storage's ``Key=Value;`` form, or none."""
    if not connection:
        return EMBEDDED
    scheme, sep, _ = connection.partition("://")
    if sep and "=" not in scheme and ";" not in scheme:
        kind = SCHEMES.get(scheme.strip().lower())
        if kind is None:
            known = ", ".join(f"{name}://" for name in SCHEMES)
            raise UnsupportedConnection(
                f"no queue backend for {scheme}:// connections (known: {known}, or an Azure Storage connection string)"
            )
        return kind
    return AZURE


def describe(connection: str | None, base_dir: Path) -> str:
    """A safe name for a connection in logs: the backend and where it is, never a secret."""
    try:
        return backend_kind(connection).describe(connection, base_dir)
    except UnsupportedConnection:
        return "unknown backend"


def embedded_file(connection: str | None, base_dir: Path) -> Path | None:
    """The absolute path of the embedded queue's file ``connection`` names (None: the default file), or None for
    another service. Raises UnsupportedConnection for a scheme nobody registered."""
    return _sqlite_path(connection, base_dir) if backend_kind(connection) is EMBEDDED else None


def connection_problem(connection: str | None, base_dir: Path) -> str | None:
    """Why ``connection`` cannot be opened (unknown scheme, malformed, unusable file), or None."""
    try:
        kind = backend_kind(connection)
    except UnsupportedConnection as exc:
        return str(exc)
    return kind.problem(connection, base_dir)


def open_backend(connection: str | None, base_dir: Path, on_retry: OnRetry = None) -> QueueBackend:
    """The backend for ``connection``; ``on_retry`` is told the kind of each transient failure that is retried.

    Raises UnsupportedConnection, naming what is wrong and never the string itself.
    """
    kind = backend_kind(connection)
    if connection and (problem := kind.problem(connection, base_dir)):
        raise UnsupportedConnection(problem)
    return kind.open(connection, base_dir, on_retry)


#: The folder of blobs beside an embedded queue file: ``.worker/blobs`` for the default ``.worker/queues.sqlite3``.
BLOBS_FOLDER = "blobs"


def private_paths(connection: str | None, base_dir: Path) -> list[Path]:
    """Where an embedded connection keeps messages and blobs, for start-up to report any that others can read.

    The queue file with its ``-wal`` and ``-shm``, the blob folder beside it, and the folder holding them when it is
    the default ``.worker`` (a folder named in ``sqlite:///PATH`` is the operator's, maybe shared on purpose, and
    the app's own folder is not the worker's to close). None for the other backends, which keep nothing here.
    """
    if connection and not connection.startswith(SQLITE_PREFIX):
        return []
    queue_file = _sqlite_path(connection, base_dir)
    own_folder = [queue_file.parent] if queue_file.parent == base_dir / DEFAULT_SQLITE_PATH.parent else []
    return [*own_folder, *queue_files(queue_file), queue_file.parent / BLOBS_FOLDER]


def open_blob_store(connection: str, base_dir: Path) -> BlobStore:
    """The blob store for ``connection``: beside the embedded queue for ``sqlite:///PATH``, else Azure Blob Storage.

    A relative PATH is taken from ``base_dir`` (host.yaml's folder), as for the
    embedded queue. Raises UnsupportedConnection naming what is missing, never the string itself.
    """
    if connection.startswith(SQLITE_PREFIX):
        from worker.backends.embedded.blobs import LocalBlobStore

        return LocalBlobStore((base_dir / connection[len(SQLITE_PREFIX) :]).parent / BLOBS_FOLDER)
    try:
        parsed = parse_connection_string(connection)
        from worker.backends.azure.blobs import AzureBlobStore

        return AzureBlobStore(parsed)
    except ConnectionStringError as exc:
        raise UnsupportedConnection(str(exc)) from None
