"""An app whose process, once its host has stopped, holds its exit until a file appears: the moment in which a
late copy of a stop signal can still arrive, held open for as long as a test needs.

``HELD_FILE`` is made when the hold begins; ``GATE_FILE`` ends it (after 60 s at most). ``HOLD_AT`` says where:
``atexit`` (default: an atexit callback, after ``worker run`` has returned) or ``finalization`` (the interpreter's
last steps, as its modules are torn down: after the atexit callbacks, once Python has put back the signals'
defaults). Its one function is never given a message: the tests stop an idle host, whose drain takes
milliseconds, which is when a late copy comes after the host has stopped listening.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable
from pathlib import Path

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="held-exit")
def idle(msg: QueueMessage) -> None:
    """Never called."""


def _hold(
    held: str = os.environ["HELD_FILE"],
    gate: str = os.environ["GATE_FILE"],
    exists: Callable[[str], bool] = os.path.exists,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Everything it uses is bound here: in the interpreter's last steps, module globals may be gone."""
    Path(held).touch()
    deadline = clock() + 60
    while not exists(gate) and clock() < deadline:
        sleep(0.02)


class _HeldAtFinalization:
    """Kept in a module global: its ``__del__`` runs as the modules are torn down."""

    def __del__(self, hold: Callable[[], None] = _hold) -> None:
        hold()


if os.environ.get("HOLD_AT", "atexit") == "finalization":
    _held = _HeldAtFinalization()
else:
    atexit.register(_hold)
