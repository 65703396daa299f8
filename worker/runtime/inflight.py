"""What a worker process holds, written where its supervisor can read it after the process has died.

A process that dies (``os._exit``, a crash, the OOM killer) says nothing on its way out.
So the host writes its invocations in flight to the file :data:`INFLIGHT_ENV` names.
It writes at most once per :data:`INTERVAL`, when they changed; the supervisor reads the last.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the supervisor reads these files, and loads nothing of the host
    from worker.invocation import Invocation

#: The environment variable naming a process's in-flight file; set by the supervisor.
INFLIGHT_ENV = "WORKER_INFLIGHT_FILE"
#: How often the host looks whether what it holds changed, in seconds.
INTERVAL = 1.0


async def record(path: Path, invocations: Callable[[], Iterable[Invocation]]) -> None:
    """Keep ``path`` saying which messages the host holds, until cancelled."""
    written: frozenset[str] | None = None
    while True:
        held = list(invocations())
        ids = frozenset(inv.id for inv in held)
        if ids != written:
            await asyncio.to_thread(
                _write,
                path,
                [
                    {
                        "function": inv.function.name,
                        "invocation_id": inv.id,
                        "messages": [delivery.raw.id for delivery in inv.deliveries],
                    }
                    for inv in held
                ],
            )
            written = ids
        await asyncio.sleep(INTERVAL)


def read(path: Path) -> list[dict[str, Any]]:
    """The invocations the process that wrote ``path`` last said it held, removing the file; none without one."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return []
    path.unlink(missing_ok=True)
    return list(found)


def _write(path: Path, held: list[dict[str, Any]]) -> None:
    """Whole or not at all: the process may die at any moment, and a half-written file would say nothing."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".inflight-")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(held, out)
    os.replace(temporary, path)
