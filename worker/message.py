"""QueueMessage: what a handler receives, with the attribute names of ``azure.functions.QueueMessage``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker.bindings.encoding import encode
from worker.model import CheckpointFailed, Lease, LeaseKeeper

if TYPE_CHECKING:
    import threading

#: What ``checkpoint`` takes: the new body as text or bytes, or a dict or list stored as JSON.
CheckpointBody = str | bytes | bytearray | dict[str, Any] | list[Any]


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

    A function declared with ``checkpoints=True`` may replace its message's
    content while it works (:meth:`checkpoint`, :meth:`checkpoint_async`), so
    that an attempt after a crash reads where the last one got to.
    """

    __slots__ = (
        "id",
        "dequeue_count",
        "insertion_time",
        "expiration_time",
        "time_next_visible",
        "properties",
        "service_attributes",
        "_body",
        "_lease",
        "_failure",
        "_poison",
        "_dropped",
        "_checkpoint_encoding",
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
        checkpoint_encoding: str | None = None,
        properties: Mapping[str, str] | None = None,
        service_attributes: Mapping[str, str] | None = None,
    ) -> None:
        """``checkpoint_encoding`` is the function's messageEncoding when it declares checkpoints (the host sets it);
        None: :meth:`checkpoint` is refused."""
        self.id = id
        self.dequeue_count = dequeue_count
        self.insertion_time = insertion_time
        self.expiration_time = expiration_time
        self.time_next_visible = time_next_visible
        #: What the sender put beside the content (SQS message attributes); empty where the service has none.
        self.properties: Mapping[str, str] = properties or {}
        #: What the service says of the message beyond the protocol (SQS's system attributes: SenderId,
        #: MessageGroupId ...), for handlers written for that service; empty elsewhere.
        self.service_attributes: Mapping[str, str] = service_attributes or {}
        self._body = body
        self._lease = lease if lease is not None else Lease.detached(id, pop_receipt)
        self._failure: str | None = None
        self._poison = False
        self._dropped: str | None = None
        self._checkpoint_encoding = checkpoint_encoding

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

    def holds_lease(self, margin: float = 0.0) -> bool:
        """Whether the invocation still holds the message, for at least ``margin`` more seconds by this process's clock.

        For a handler about to make its work visible (publish a table version,
        move a pointer): once this is False another receiver may have the
        message and be doing the same work, so publishing could undo theirs.
        False once ``lease_lost`` or ``cancelled`` is set, and also when the
        lease has run out by the clock although no renewal has said so yet: a
        process resumed after a pause (SIGSTOP, a frozen VM) may get here
        before its first renewal. A message built outside a host (a handler's
        unit test) has no lease to lose and counts as held.
        """
        lease = self._lease
        if lease.is_lost or lease.is_cancelled:
            return False
        return lease.keeper is None or lease.seconds_left() > margin

    def fail(self, reason: str, *, poison: bool = False) -> None:
        """Fail this message alone, though the handler returns normally (for ``cardinality="many"`` batches).

        It is then retried or poisoned like a message whose handler raised;
        the other messages of the batch are deleted. ``poison=True`` sends it
        to ``<queue>-poison`` at once, whatever its dequeue count (as raising
        :class:`Poison` does for a whole invocation).
        """
        self._failure = reason
        self._poison = poison

    def drop(self, reason: str) -> None:
        """Take this message of a ``cardinality="many"`` batch as done without handling it, as Lambda's event
        filters drop a record that matches none of them: it is deleted whatever the rest of the batch comes to, and
        counted as ``filtered``, not ``succeeded``."""
        self._dropped = reason

    @property
    def dropped(self) -> str | None:
        """The reason given to :meth:`drop`, or None."""
        return self._dropped

    @property
    def poison_requested(self) -> bool:
        """True when :meth:`fail` asked for the poison queue at once."""
        return self._poison

    @property
    def failure(self) -> str | None:
        """The reason given to :meth:`fail`, or None."""
        return self._failure

    def get_body(self) -> bytes:
        """The body as received, or as last checkpointed."""
        return self._body

    def checkpoint(self, content: CheckpointBody) -> None:
        """Replace the message's content with ``content`` while the lease is held, from a sync handler; blocks until stored.

        For work done in chunks: record how far it got, and an attempt after a
        crash, a lost lease or a failure reads that instead of the original
        (``get_body`` and ``get_json`` here show it at once). ``content`` is
        stored as a queue output would be: text as UTF-8, bytes as they are,
        a dict or list as JSON, under the function's messageEncoding, within
        the backend's size limit (``MessageTooLarge`` past it). The lease is
        extended as a renewal would; the dequeue count is unchanged (only a
        receive counts an attempt). Needs ``checkpoints=True`` on
        ``@app.queue_trigger``, so that a backend that cannot change a
        message's content (OCI Queue) is refused at start.

        Raises :class:`worker.CheckpointFailed` when the content was not
        stored: the lease is lost (``lease_lost`` is set; stop, the message is
        someone else's) or storage failed after its retries.
        """
        body, text, keeper = self._checkpoint_call(content)
        loop = keeper.loop
        assert loop is not None  # a keeper that holds a lease knows its loop
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "msg.checkpoint() waits for storage and would block the event loop: "
                "in an async handler, await msg.checkpoint_async(...)"
            )
        call = keeper.checkpoint(self._lease, text)
        try:
            stored = asyncio.run_coroutine_threadsafe(call, loop)
        except RuntimeError:  # the loop is closed: the host has stopped
            call.close()
            raise CheckpointFailed(f"message {self.id} was not checkpointed: the host has stopped") from None
        try:
            stored.result()
        except concurrent.futures.CancelledError:
            raise CheckpointFailed(f"message {self.id}: the host stopped during the checkpoint") from None
        self._body = body

    async def checkpoint_async(self, content: CheckpointBody) -> None:
        """:meth:`checkpoint` for async handlers: the same, awaited on the host's event loop."""
        body, text, keeper = self._checkpoint_call(content)
        if asyncio.get_running_loop() is not keeper.loop:
            raise RuntimeError(
                "msg.checkpoint_async() runs on the host's event loop: in a sync handler, call msg.checkpoint(...)"
            )
        await keeper.checkpoint(self._lease, text)
        self._body = body

    def _checkpoint_call(self, content: CheckpointBody) -> tuple[bytes, str, LeaseKeeper]:
        """The new body, its wire text, and what stores it; RuntimeError where checkpoints cannot be made at all."""
        keeper = self._lease.keeper
        if keeper is None:
            raise RuntimeError(f"message {self.id} is not held by a running host, so it cannot be checkpointed")
        if self._checkpoint_encoding is None:
            raise RuntimeError(
                "msg.checkpoint needs checkpoints=True on @app.queue_trigger, so that a backend that "
                "cannot change a message's content is refused at start"
            )
        if isinstance(content, str):
            body = content.encode("utf-8")
        elif isinstance(content, (bytes, bytearray)):
            body = bytes(content)
        elif isinstance(content, (dict, list)):
            body = json.dumps(content).encode("utf-8")
        else:
            raise TypeError(
                f"a checkpoint takes str, bytes, or a dict or list (stored as JSON), not {type(content).__name__}"
            )
        return body, encode(body, self._checkpoint_encoding), keeper

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
