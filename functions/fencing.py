"""The fence of a step's table writes: the step may publish only while its invocation still holds its messages.

A worker paused long enough (SIGSTOP, a frozen VM, a long collection) loses
its messages' leases; another worker receives them and writes the same
tables. When the first one runs again it must not publish what it computed:
published after the newer writer's version, it could undo it. The host marks
a lost lease when a renewal finds the message taken, but a process that was
just resumed may reach its publish before its first renewal does; so the
check is :meth:`worker.QueueMessage.holds_lease`, which also counts a lease
that has run out by this process's clock as lost.
"""

from __future__ import annotations

from collections.abc import Sequence

from functions.tables import StaleWriter
from worker import QueueMessage

#: Seconds of lease a publish must have left. The host counts a lease from when its renewal's answer came back,
#: the queue from when it read the request, a little before; the publish itself (a rename) takes microseconds.
MARGIN = 1.0


class HeldMessages:
    """A :class:`functions.tables.Fence` that passes while the invocation holds every one of its messages.

    One lost message is enough to fail it: the version was computed from the
    whole batch, and whoever holds that message now writes its rows.
    """

    def __init__(self, messages: Sequence[QueueMessage]) -> None:
        self.messages = list(messages)

    def check(self) -> None:
        lost = [msg.id for msg in self.messages if not msg.holds_lease(MARGIN)]
        if lost:
            raise StaleWriter(
                f"lease lost: this invocation no longer holds message(s) {', '.join(lost)}, which "
                "another worker may be processing; its table version was discarded"
            )
