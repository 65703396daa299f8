"""The limit on open files, raised at start from the soft value to the hard one, as servers do.

Endpoint connections, blob outputs and storage sockets each hold a file descriptor.
Many systems set a low soft limit (for programs that use ``select``) under a much higher hard one.
The worker uses ``epoll``: the low limit only brings "Too many open files" under load.
``worker run`` raises it before the supervisor starts its processes, which inherit it.
"""

from __future__ import annotations

import resource

#: The limit asked for when the hard one is unlimited (Linux refuses an unlimited soft limit on open files).
UNLIMITED_ASKS = 1 << 20


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise this process's soft limit on open files to the hard one; (before, after) when it rose, else None
    (already there, or the system refused: the worker runs with what it has)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_ASKS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft >= wanted:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return None
    return soft, wanted
