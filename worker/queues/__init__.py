"""Queue backends behind one protocol; ``open_backend`` picks one from a connection string."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from worker.queues.base import QueueBackend
from worker.queues.connection import ConnectionStringError, parse_connection_string

#: Where the embedded queue lives when a function names no connection, relative to host.yaml.
DEFAULT_SQLITE_PATH = Path(".worker") / "queues.sqlite3"
SQLITE_PREFIX = "sqlite:///"


class UnsupportedConnection(ValueError):
    """A connection string this host cannot use; the message never contains the string itself."""


def describe(connection: str | None) -> str:
    """A safe name for a connection in logs: the backend and where it is, never a secret."""
    if not connection:
        return "embedded queue (default file)"
    if connection.startswith(SQLITE_PREFIX):
        return f"embedded queue {connection[len(SQLITE_PREFIX):]}"
    try:
        return parse_connection_string(connection).describe()
    except ConnectionStringError:
        return "Azure Storage (malformed connection string)"


def open_backend(
    connection: str | None, base_dir: Path, on_retry: Callable[[str], None] | None = None
) -> QueueBackend:
    """The backend for ``connection``: unset or ``sqlite:///PATH`` is the embedded queue, else Azure Storage.

    A relative PATH (``sqlite:///queues.db``) is taken from ``base_dir``; an
    absolute one has four slashes (``sqlite:////var/lib/q.db``). ``on_retry``
    is told the kind of each transient storage failure that is retried.
    """
    if not connection:
        from worker.queues.sqlite import SqliteBackend

        return SqliteBackend(base_dir / DEFAULT_SQLITE_PATH)
    if connection.startswith(SQLITE_PREFIX):
        from worker.queues.sqlite import SqliteBackend

        return SqliteBackend(base_dir / connection[len(SQLITE_PREFIX):])
    try:
        parsed = parse_connection_string(connection)
    except ConnectionStringError as exc:
        raise UnsupportedConnection(str(exc)) from None
    if parsed.queue_endpoint is None:
        raise UnsupportedConnection("connection string has no QueueEndpoint (nor an AccountName to derive one from)")
    from worker.queues.azure import AzureBackend

    return AzureBackend(parsed, on_retry=on_retry)
