"""Queue backends behind one protocol; ``open_backend`` picks one from a connection string."""

from __future__ import annotations

from pathlib import Path

from worker.queues.base import QueueBackend

#: Where the embedded queue lives when a function names no connection, relative to host.yaml.
DEFAULT_SQLITE_PATH = Path(".worker") / "queues.sqlite3"
SQLITE_PREFIX = "sqlite:///"


class UnsupportedConnection(ValueError):
    """A connection string this host cannot use; the message never contains the string itself."""


def describe(connection: str | None) -> str:
    """A safe name for a connection in logs: the backend and path, never a secret."""
    if not connection:
        return "embedded queue (default file)"
    if connection.startswith(SQLITE_PREFIX):
        return f"embedded queue {connection[len(SQLITE_PREFIX):]}"
    return "Azure Storage connection"


def open_backend(connection: str | None, base_dir: Path) -> QueueBackend:
    """The backend for ``connection``: unset or ``sqlite:///PATH`` is the embedded queue.

    A relative PATH (``sqlite:///queues.db``) is taken from ``base_dir``; an
    absolute one has four slashes (``sqlite:////var/lib/q.db``).
    """
    from worker.queues.sqlite import SqliteBackend

    if not connection:
        return SqliteBackend(base_dir / DEFAULT_SQLITE_PATH)
    if connection.startswith(SQLITE_PREFIX):
        return SqliteBackend(base_dir / connection[len(SQLITE_PREFIX):])
    raise UnsupportedConnection(
        "this connection string is not an embedded-queue one (sqlite:///PATH); Azure Storage connections are not "
        "supported by this build"
    )
