"""Blob input and output bindings of queue-triggered functions, as Azure Functions has them.

``@app.blob_input`` reads a blob before the handler runs (None when missing, as in Functions).
``@app.blob_output`` writes after success and before the trigger message is deleted.
Paths are ``container/blob`` templates (:mod:`worker.bindings.expressions`), or an expression giving one.
A failed read or write fails the attempt; the message is retried, never lost.
A path no attempt could use (another account, a refused name) sends the message to poison at once.
"""

from __future__ import annotations

import inspect
import io
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.backends.blobs import BlobData, BlobStore, InvalidBlobName, check_container, check_names
from worker.bindings import expressions
from worker.bindings.errors import Unusable, UnusableOutput
from worker.bindings.expressions import ExpressionError
from worker.bindings.types import DataKind, annotation, data_kind


@dataclass(frozen=True, slots=True)
class BlobInput:
    """One ``@app.blob_input``: the blob is read into ``arg_name`` before the handler runs."""

    arg_name: str
    path: str
    connection: str | None
    #: What the handler gets: an InputStream ("object"), the text, or the bytes.
    kind: DataKind = "object"


@dataclass(frozen=True, slots=True)
class BlobOutput:
    """One ``@app.blob_output``: what the handler sets on ``arg_name`` is written to ``path`` on success."""

    arg_name: str
    path: str
    connection: str | None


class BlobBindingError(ValueError):
    """A blob binding cannot be used as declared, or a value cannot be written to a blob."""


class UnusableBlobPath(BlobBindingError, Unusable):
    """A blob path that gave, for one message, what no attempt can use: a URL of another account, a name the
    service refuses. The message goes to poison at once instead of being tried again."""


_CONTAINER_PART = re.compile(r"^[^/]+/.+")
#: A path that is one expression, resolved per message to ``container/blob`` or to a blob URL (``{data.url}``).
_ONE_EXPRESSION = re.compile(r"^\{[^{}]+\}$")


def check_blob_path(path: str) -> None:
    """A path names a container and a blob (``container/blob``), or is one expression that gives such a path or a
    blob URL at run time (``{url}``), as the WebJobs SDK takes it."""
    if not isinstance(path, str) or not (_CONTAINER_PART.match(path.strip()) or _ONE_EXPRESSION.match(path.strip())):
        raise BlobBindingError(
            f"blob path {path!r} must look like 'container/blob' (binding expressions allowed), "
            "or be one expression that gives such a path or a blob URL ('{url}')"
        )
    container, _, blob = path.strip().partition("/")
    fixed = not any(mark in path for mark in "{}%")
    if fixed or not any(mark in container for mark in "{}%"):  # what is fixed is refused now, not at every message
        try:
            if fixed:
                check_names(container, blob)
            else:
                check_container(container)
        except InvalidBlobName as exc:
            raise BlobBindingError(f"blob path {path!r}: {exc}") from None


#: What a binding's ``data_type`` asks a blob input to be.
_DATA_TYPE_KINDS: dict[str, DataKind] = {"string": "str", "binary": "bytes"}


def input_kind(handler: Callable[..., Any], arg_name: str, data_type: str | None) -> DataKind:
    """What a blob input parameter receives: by its annotation, else by ``data_type``, else an InputStream."""
    kind = data_kind(handler, arg_name)
    if kind != "object" or annotation(handler, arg_name) is not inspect.Parameter.empty:
        return kind
    return _DATA_TYPE_KINDS.get(str(data_type or "").lower(), "object")


class InputStream:
    """A blob read for a handler: ``read()``, ``name`` (``container/blob``), ``length`` and ``uri``.

    The same attributes as ``azure.functions.InputStream``; read-only and
    not seekable, as there.
    """

    def __init__(self, blob: BlobData) -> None:
        self._data = io.BytesIO(blob.data)
        self.name = blob.name
        self.length = blob.length
        self.uri = blob.uri

    def read(self, size: int | None = -1) -> bytes:
        return self._data.read(-1 if size is None else size)

    read1 = read

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False


def split(path: str) -> tuple[str, str]:
    """``container/blob/with/slashes`` into the container and the blob's path."""
    container, _, blob = path.partition("/")
    if not container or not blob:
        raise BlobBindingError(f"blob path {path!r} resolved to no container or no blob name")
    return container, blob


def as_argument(blob: BlobData | None, kind: DataKind) -> Any:
    """A read blob as the handler's parameter asks for it; None stays None (the blob does not exist)."""
    if blob is None:
        return None
    if kind == "bytes":
        return blob.data
    if kind == "str":
        return blob.data.decode("utf-8")
    return InputStream(blob)


def content(value: Any) -> bytes | None:
    """What a blob output holds: text as UTF-8, bytes, or what a file-like ``read()`` returns; None writes nothing.

    As the Functions Python worker's blob converter: any other type fails the invocation.
    """
    if value is None:
        return None
    if callable(getattr(value, "read", None)):
        value = value.read()
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise UnusableOutput(f"a blob output takes str, bytes or a file-like object, not {type(value).__name__}")


def _location(path: str, data: Mapping[str, Any], store: BlobStore) -> tuple[str, str]:
    """The container and blob a path names for one message: ``%settings%`` (checked at start), then ``{data}``;
    a value that is a URL must be one of ``store``'s blobs. UnusableBlobPath when no attempt could use it."""
    try:
        value = expressions.resolve(expressions.resolve_settings(path, os.environ), data)
        if "://" in value:
            return store.locate(value)
        container, blob = split(value)
        check_names(container, blob)
    except (ExpressionError, InvalidBlobName, BlobBindingError) as exc:
        raise UnusableBlobPath(f"blob path {path!r}: {exc}") from None
    return container, blob


async def read_inputs(
    bindings: tuple[BlobInput, ...], data: Mapping[str, Any], blobs_for: Callable[[str | None], BlobStore]
) -> dict[str, Any]:
    """Read every blob input for one message: ``{arg_name: value}``, None for a blob that does not exist."""
    values: dict[str, Any] = {}
    for binding in bindings:
        store = blobs_for(binding.connection)
        container, blob = _location(binding.path, data, store)
        values[binding.arg_name] = as_argument(await store.read(container, blob), binding.kind)
    return values


async def write_output(
    binding: BlobOutput, value: Any, data: Mapping[str, Any], blobs_for: Callable[[str | None], BlobStore]
) -> bool:
    """Write one blob output's value; False when the handler set nothing."""
    body = content(value)
    if body is None:
        return False
    store = blobs_for(binding.connection)
    container, blob = _location(binding.path, data, store)
    await store.write(container, blob, body)
    return True
