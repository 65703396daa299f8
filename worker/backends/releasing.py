"""What the remote backends whose SDKs block (OCI Queue, Amazon SQS) share about receives cancelled under way.

Such a receive runs on in its thread after its caller has gone, and what it brings is released; the backend's
``close`` waits for those releases, counted here, so that a cancelled receive loses nothing and hides nothing.
"""

from __future__ import annotations

import threading


class PendingReleases:
    """A count of calls whose result may still have to be released, and a wait for it to reach zero (any thread)."""

    def __init__(self) -> None:
        self._zero = threading.Condition()
        self.pending = 0

    def hold(self) -> None:
        with self._zero:
            self.pending += 1

    def released(self) -> None:
        with self._zero:
            self.pending -= 1
            self._zero.notify_all()

    def wait(self, timeout: float) -> bool:
        """Whether the count reached zero within ``timeout`` seconds."""
        with self._zero:
            return self._zero.wait_for(lambda: self.pending == 0, timeout)
