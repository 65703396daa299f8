"""What the worker says when a private part of a dependency is not as it expects: one warning, then the public path.

A few places reach into a dependency's private parts (ARCHITECTURE.md lists them).
Each checks the part first; where it differs, it takes a public path and calls :func:`fall_back`.
That logs one warning per part and process, naming the installed version.
So an upgrade shows in the log, not as a traceback or a silent change.
"""

from __future__ import annotations

import functools
import threading
from importlib import metadata

import structlog

log = structlog.get_logger("worker.dependencies")


def version(distribution: str) -> str:
    """The installed version of ``distribution`` ("not installed" when pip knows none)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


#: Held while a warning is given, so that threads meeting the same part at once give it once.
_LOCK = threading.Lock()


def fall_back(distribution: str, part: str, instead: str) -> None:
    """Warn, once per process for each ``part``, that ``distribution``'s ``part`` is not as expected and what the
    worker does ``instead``."""
    with _LOCK:
        _once(distribution, part, instead)


@functools.cache
def _once(distribution: str, part: str, instead: str) -> None:
    """The warning itself; the cache is what makes it once."""
    log.warning(
        f"{distribution} {version(distribution)} is not as this worker expects ({part}); {instead}",
        dependency=distribution,
        version=version(distribution),
        part=part,
    )
