"""A book of the receipts a backend handed out.

It serves services whose answers cannot tell a stale receipt from a gone message (OCI Queue, Amazon SQS).
"""

from __future__ import annotations

from worker.backends.queues import MessageNotFound, PopReceiptMismatch

#: Receipts a backend remembers: far more than a host holds leases on at once.
RECEIPT_BOOK_SIZE = 20_000


class Receipts:
    """Which message each receipt this backend handed out belongs to, and each message's latest receipt.

    OCI's update and delete take a receipt alone, and answer alike (404, or 400 InvalidParameter: see
    :func:`worker.backends.oci.errors.receipt_refused`) for a message that is gone and for a receipt a later
    delivery has replaced; the protocol names the message too and tells the two apart. So a receipt of another
    message than the one named is refused here (MessageNotFound, as the named message has no such delivery), and
    a refusal of a receipt older than the latest one received is a stale receipt (PopReceiptMismatch). What this
    process never saw (another worker's deliveries) reads as MessageNotFound. Used on the event loop only.
    """

    def __init__(self, size: int = RECEIPT_BOOK_SIZE) -> None:
        self.size = size
        self._owner: dict[str, str] = {}
        #: Latest receipt by (queue, message id): ids are only known to be unique within a queue.
        self._latest: dict[tuple[str, str], str] = {}
        #: Receipts the service refused as no longer current (:meth:`lost`), with why.
        self._lost: dict[str, str] = {}

    def received(self, queue: str, message_id: str, receipt: str) -> None:
        self._latest.pop((queue, message_id), None)  # re-insert: the oldest entries are the ones dropped
        self._latest[(queue, message_id)] = receipt
        self._owner[receipt] = message_id
        while len(self._latest) > self.size:
            del self._latest[next(iter(self._latest))]
        while len(self._owner) > self.size:
            del self._owner[next(iter(self._owner))]

    def owner(self, receipt: str) -> str | None:
        """The id of the message ``receipt`` was handed out with, if this backend handed it out."""
        return self._owner.get(receipt)

    def replaced(self, queue: str, message_id: str, receipt: str) -> bool:
        """Whether a later delivery of the message gave it another receipt than ``receipt``."""
        latest = self._latest.get((queue, message_id))
        return latest is not None and latest != receipt

    def deleted(self, queue: str, message_id: str) -> None:
        self._latest.pop((queue, message_id), None)

    def lost(self, receipt: str, why: str) -> None:
        """The service refused ``receipt`` as no longer current: every later call with it is refused here as stale,
        for a service that would answer a delete with it as done without deleting (SQS, once another consumer
        received the message)."""
        self._lost[receipt] = why
        while len(self._lost) > self.size:
            del self._lost[next(iter(self._lost))]

    def check(self, queue: str, message_id: str, receipt: str) -> None:
        """Answer before any request what the book knows of a receipt: another message's (MessageNotFound), one a
        later delivery replaced or the service refused (PopReceiptMismatch), or one of a message this backend deleted
        (MessageNotFound).

        For a service that would act on another message's receipt, or accept a stale one (Amazon SQS deletes with
        a handle a later receive replaced); what the book never saw is left to the service.
        """
        owner = self.owner(receipt)
        if owner is not None and owner != message_id:
            raise MessageNotFound(
                f"message {message_id} in queue {queue!r} has no delivery with this receipt (it is message {owner}'s)"
            )
        if (why := self._lost.get(receipt)) is not None:  # never read as a delete an earlier attempt made
            raise PopReceiptMismatch(f"receipt for message {message_id} in queue {queue!r} is no longer current: {why}")
        if self.replaced(queue, message_id, receipt):
            raise PopReceiptMismatch(
                f"receipt for message {message_id} in queue {queue!r} is stale: it was delivered again since"
            )
        if owner is not None and (queue, message_id) not in self._latest:
            raise MessageNotFound(f"message {message_id} in queue {queue!r} was deleted")
