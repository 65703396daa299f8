"""Blob binding values: what a handler gets from a blob input, and what a blob output accepts."""

from __future__ import annotations

import io

import pytest

from worker.backends.blobs import BlobData
from worker.bindings.blobs import BlobBindingError, InputStream, as_argument, check_blob_path, content, split
from worker.bindings.errors import UnusableOutput

BLOB = BlobData(container="reports", path="2026/11/day.json", data=b'{"n": 1}', uri="http://x/reports/2026/11/day.json")


def test_an_input_stream_has_the_attributes_of_the_functions_one() -> None:
    stream = as_argument(BLOB, "object")

    assert isinstance(stream, InputStream)
    assert (stream.name, stream.length, stream.uri) == ("reports/2026/11/day.json", 8, BLOB.uri)
    assert stream.read(3) == b'{"n'
    assert stream.read() == b'": 1}'
    assert stream.readable() and not stream.seekable() and not stream.writable()


def test_an_input_as_text_or_bytes_and_a_missing_blob_as_none() -> None:
    assert as_argument(BLOB, "str") == '{"n": 1}'
    assert as_argument(BLOB, "bytes") == b'{"n": 1}'
    assert as_argument(None, "object") is None
    assert as_argument(None, "str") is None


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("héllo", "héllo".encode()),
        (b"\x00\xff", b"\x00\xff"),
        (bytearray(b"ab"), b"ab"),
        (io.BytesIO(b"file"), b"file"),
        (io.StringIO("text file"), b"text file"),
        (None, None),
    ],
)
def test_an_output_takes_what_the_python_worker_blob_converter_takes(value: object, stored: bytes | None) -> None:
    assert content(value) == stored


@pytest.mark.parametrize("value", [{"a": 1}, 17, ["a"]])
def test_an_output_refuses_other_types_naming_them(value: object) -> None:
    """Refused as no attempt could write it: the message goes to poison at once."""
    with pytest.raises(UnusableOutput, match=f"not {type(value).__name__}"):
        content(value)


def test_a_resolved_path_splits_into_container_and_blob() -> None:
    assert split("reports/2026/11/day.json") == ("reports", "2026/11/day.json")
    with pytest.raises(BlobBindingError, match="no container or no blob name"):
        split("reports/")


@pytest.mark.parametrize("path", ["reports/a/../b.txt", "reports//b.txt", "reports/" + "x" * 1025])
def test_a_literal_blob_name_the_service_refuses_is_refused_at_start(path: str) -> None:
    """Nothing in it comes from a message, so every message would fail the same way."""
    with pytest.raises(BlobBindingError, match="blob name"):
        check_blob_path(path)
    check_blob_path("reports/{name}/../b.txt")  # a segment from the message: checked per message, poisoned there
