"""The handover file: how a process recycled past functionTimeout hands its timed-out messages to the next one.

The supervisor names one per process (:data:`HANDOVER_ENV`); the recycled process writes it whole, then exits.
The supervisor reads why (:func:`recycle_reason`); the next process takes it (:func:`take`) and settles.
It uses the standard library alone: the supervisor reads it and loads nothing of the host.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: Exit code of a ``worker run`` process recycled after a sync handler ran past functionTimeout.
RECYCLED = 3
#: The environment variable naming a process's handover file; set by the supervisor.
HANDOVER_ENV = "WORKER_HANDOVER_FILE"


@dataclass(frozen=True, slots=True)
class HandedOver:
    """A timed-out message, as the next process needs it to settle the attempt: its lease, content and reason."""

    function: str
    invocation_id: str
    message_id: str
    pop_receipt: str
    dequeue_count: int
    #: The stored text (as last checkpointed), for the copy in the poison queue if this was the last attempt.
    content: str
    #: ISO 8601, as the message's ``{insertionTime}``.
    insertion_time: str
    #: When the message expires (Unix seconds), which bounds its retry delay; None: never.
    message_expires: float | None
    reason: str
    #: When the lease ends unless renewed, as wall-clock seconds: the next process has another monotonic clock.
    lease_ends: float


def write(path: Path, reason: str, messages: Sequence[HandedOver]) -> None:
    """Write the handover file whole or not at all (readable by this user only: it holds message bodies)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".handover-")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump({"reason": reason, "messages": [asdict(m) for m in messages]}, out)
    os.replace(temporary, path)


def recycle_reason(path: Path) -> str | None:
    """Why the process that wrote ``path`` was recycled, leaving the file to the next process; None when there is no
    file (the process was not recycled)."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["reason"])
    except FileNotFoundError:
        return None


def take(path: Path) -> list[HandedOver]:
    """The messages a recycled process left in ``path``, removing the file; none when there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    path.unlink()
    return [HandedOver(**fields) for fields in json.loads(text)["messages"]]
