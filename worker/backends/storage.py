"""The storage a running host reaches by connection setting: queue backends and blob stores."""

from __future__ import annotations

from typing import Protocol

from worker.backends.blobs import BlobStore
from worker.backends.queues import QueueBackend


class Storage(Protocol):
    """Opens (once) and hands out the queue backend and blob store a binding's ``connection`` names.

    ``None`` is a WorkerApp binding that names no connection: ``AzureWebJobsStorage``
    when it is set, else the embedded queue and its blob folder.
    """

    def queues(self, connection: str | None) -> QueueBackend:
        """The queue backend of ``connection``."""

    def blobs(self, connection: str | None) -> BlobStore:
        """The blob store of ``connection``."""

    def sent(self, backend: QueueBackend, queue: str) -> None:
        """A message was just put on ``queue`` of ``backend`` by this host: wake its listener here, if it has one.

        As the Functions host's QueueListener.Notify: a function that feeds
        another through a queue output hands over at once, instead of when the
        next poll comes round.
        """
