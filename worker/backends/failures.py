"""What every remote backend shares about failures: unusable connection strings, network causes named for people.

Each service reads its own answers in its package (``azure/errors.py``, ``oci/errors.py``).
Network failures look alike whatever the client, so they read alike everywhere.
Log lines, ``/readyz`` and the CLI name the cause, never a URL (its query may hold a SAS token).
"""

from __future__ import annotations

import socket
import ssl

#: Seconds a remote backend waits for a connection to open.
CONNECT_TIMEOUT = 5


class ConnectionStringError(ValueError):
    """A connection string that cannot be used; the message names keys only, never values."""


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (an SDK's ``inner_exception`` or ``os_error``, ``__cause__``, ``__context__``),
    nearest first."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        pending.extend(
            [
                getattr(current, "inner_exception", None),
                getattr(current, "os_error", None),
                current.__cause__,
                current.__context__,
            ]
        )
    return seen


def network_cause(exc: BaseException) -> str | None:
    """ "connection refused", "name not resolved", "TLS ...", "connection reset"; None if none of these is a cause."""
    for cause in causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "name not resolved"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted: {cause.verify_message or cause.reason}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS: {cause.reason or cause}"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
    return None


def timed_out(exc: BaseException) -> bool:
    return any(isinstance(cause, TimeoutError) for cause in causes(exc))


def first_line(exc: BaseException | str) -> str:
    """The first line of an error's message (at most 300 characters): SDK messages run to pages."""
    text = str(getattr(exc, "message", None) or exc).strip().splitlines()
    return text[0][:300] if text else (type(exc).__name__ if isinstance(exc, BaseException) else "")


def describe_network_failure(exc: BaseException) -> str:
    """What a failure that is not a service's answer was, for people: its network cause, "timed out", or its type
    and first line."""
    return network_cause(exc) or ("timed out" if timed_out(exc) else f"{type(exc).__name__}: {first_line(exc)}")
