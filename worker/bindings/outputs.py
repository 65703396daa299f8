"""Output bindings: values a handler sets are sent (queues) or written (blobs) only when it succeeds.

As in Azure Functions, ``@app.queue_output`` or ``@app.blob_output`` gives an :class:`Out` to ``set()``.
The host sends after the handler returns and before the trigger message is deleted.
A failed invocation sends nothing; a failed send fails it (at-least-once, never lost).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from worker.backends.queues import put_creating
from worker.backends.storage import Storage
from worker.bindings.blobs import BlobOutput, write_output
from worker.bindings.encoding import encode
from worker.bindings.errors import UnusableOutput

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OutputBinding:
    """One ``@app.queue_output`` of a function."""

    arg_name: str
    queue_name: str
    connection: str | None
    #: The queue's channel to put on (OCI Queue); None: the queue itself.
    channel: str | None = None


class Out(Generic[T]):
    """A value a handler hands to an output binding; ``azure.functions.Out`` has the same two methods."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value: T | None = None

    def set(self, value: T) -> None:
        self._value = value

    def get(self) -> T | None:
        return self._value


def _texts(value: Any) -> list[str | bytes]:
    """The message bodies one output value stands for: a list sends one message per item.

    A number or a boolean is refused rather than sent as its text: the
    Functions Python worker refuses them too, and ``123`` on a queue is more
    often a mistake than a message.
    """
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [body for item in value for body in _texts(item)]
    if isinstance(value, (str, bytes, bytearray)):
        return [bytes(value) if isinstance(value, bytearray) else value]
    if isinstance(value, dict):
        return [json.dumps(value)]
    raise UnusableOutput(
        f"a queue output takes str, bytes, a dict (sent as JSON) or a list of them, not {type(value).__name__} {value!r:.40}"
    )


async def send_outputs(
    bindings: tuple[OutputBinding | BlobOutput, ...],
    values: dict[str, Out[Any]],
    storage: Storage,
    encoding: str,
    data: Mapping[str, Any],
) -> int:
    """Send every value set on ``values`` to its queue (created if missing) or blob; returns how many were written.

    ``data`` is the trigger message's binding data, for blob paths' expressions.
    """
    sent = 0
    for binding in bindings:
        if isinstance(binding, BlobOutput):
            sent += await write_output(binding, values[binding.arg_name].get(), data, storage.blobs)
            continue
        bodies = _texts(values[binding.arg_name].get())
        if not bodies:
            continue
        backend = storage.queues(binding.connection)
        for body in bodies:
            text = encode(body, encoding)
            await put_creating(backend, binding.queue_name, text, channel=binding.channel)
            sent += 1
        storage.sent(backend, binding.queue_name)
    return sent
