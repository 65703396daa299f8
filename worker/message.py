"""QueueMessage: what a handler receives, with the attribute names of ``azure.functions.QueueMessage``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker.model import Lease

if TYPE_CHECKING:
    import threading


class Poison(Exception):  # noqa: N818 -- named for what the handler asks, as Functions users would say it
    """Raised by a handler: its message goes to ``<queue>-poison`` at once, whatever its dequeue count.

    For a message that can never succeed (bad data, a permanent refusal
    downstream), so that it is not retried ``maxDequeueCount`` times first.
    The reason is logged with the poison copy's id and counted by function
    (``poison_requested``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QueueMessage:
    """A received message, decoded under messageEncoding.

    Handlers read it; the host alone deletes, releases or renews it. Two events
    let a long handler stop early when its work would be wasted:
    ``lease_lost`` is set when a renewal finds the message taken by someone
    else or gone; ``cancelled`` is set whenever the host gives up on the
    invocation (lease lost, functionTimeout, shutdown past drainTimeout).
    They are ``threading.Event`` so that synchronous handlers can poll them too.
    """

    __slots__ = (
        "id",
        "dequeue_count",
        "insertion_time",
        "expiration_time",
        "time_next_visible",
        "_body",
        "_lease",
        "_failure",
        "_poison",
    )

    def __init__(
        self,
        *,
        id: str,
        body: bytes,
        dequeue_count: int,
        insertion_time: datetime | None,
        expiration_time: datetime | None,
        time_next_visible: datetime | None,
        pop_receipt: str | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.id = id
        self.dequeue_count = dequeue_count
        self.insertion_time = insertion_time
        self.expiration_time = expiration_time
        self.time_next_visible = time_next_visible
        self._body = body
        self._lease = lease if lease is not None else Lease.detached(id, pop_receipt)
        self._failure: str | None = None
        self._poison = False

    @property
    def pop_receipt(self) -> str | None:
        """The receipt as of the last renewal (it changes each time the lease is extended)."""
        return self._lease.pop_receipt

    @property
    def lease_lost(self) -> threading.Event:
        return self._lease.lost

    @property
    def cancelled(self) -> threading.Event:
        return self._lease.cancelled

    def fail(self, reason: str, *, poison: bool = False) -> None:
        """Fail this message alone, though the handler returns normally (for ``cardinality="many"`` batches).

        It is then retried or poisoned like a message whose handler raised;
        the other messages of the batch are deleted. ``poison=True`` sends it
        to ``<queue>-poison`` at once, whatever its dequeue count (as raising
        :class:`Poison` does for a whole invocation).
        """
        self._failure = reason
        self._poison = poison

    @property
    def poison_requested(self) -> bool:
        """True when :meth:`fail` asked for the poison queue at once."""
        return self._poison

    @property
    def failure(self) -> str | None:
        """The reason given to :meth:`fail`, or None."""
        return self._failure

    def get_body(self) -> bytes:
        return self._body

    def get_json(self) -> Any:
        """The body parsed as JSON; ValueError that says whether UTF-8 or JSON is at fault."""
        try:
            text = self._body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"message {self.id} body is not valid UTF-8: {exc}") from None
        if not text.strip():
            raise ValueError(f"message {self.id} body is empty, not JSON")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"message {self.id} body is not valid JSON: {exc}") from None

    def __repr__(self) -> str:
        return f"<QueueMessage id={self.id} dequeue_count={self.dequeue_count} bytes={len(self._body)}>"
