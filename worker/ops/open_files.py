"""The limit on open files, raised at start from the soft value to the hard one, as servers do.

Each connection to the endpoints, each blob output and each storage socket holds a file descriptor. Many systems
still give a process a soft limit of a few hundred or a thousand (kept low for programs that use ``select``) under a
hard one many times larger that any process may raise itself to; the worker uses ``epoll`` and gains nothing from
the low one but failures ("Too many open files") when something floods it. Raised in ``worker run`` before the
supervisor starts its processes, which inherit it.
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
