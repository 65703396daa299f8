"""The embedded blob store: blobs as files under ``<root>/<container>/<path>``, beside the embedded queue.

A write goes to a temporary file, is flushed, then renamed over the blob.
So a reader sees the old or the new blob whole, and a crash leaves only an ignored temporary file.
File I/O runs in a thread, off the event loop.
Blobs are owner-only: files 0600, folders 0700 (:mod:`worker.backends.embedded.files`).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from worker.backends.blobs import BlobData, InvalidBlobName, check_container, check_names, locate_in, without_query
from worker.backends.embedded.files import private_folder

#: Temporary files of writes in progress start with this; no blob name segment may (they are hidden).
_TEMP_PREFIX = ".tmp-"


class LocalBlobStore:
    """Blobs in a folder; implements :class:`worker.backends.blobs.BlobStore`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def describe(self) -> str:
        return f"embedded blob folder {self.root}"

    def locate(self, url: str) -> tuple[str, str]:
        """A ``file://`` URL of a blob in this folder (``BlobData.uri``)."""
        found = locate_in(url, self.root.as_uri())
        if found is None:
            raise InvalidBlobName(f"blob URL {without_query(url)} is not in {self.describe()}")
        check_names(*found)
        return found

    def _file(self, container: str, path: str) -> Path:
        check_names(container, path)
        if any(part.startswith(_TEMP_PREFIX) for part in path.split("/")):
            raise ValueError(f"blob name {path!r} may not have a segment starting with {_TEMP_PREFIX!r} here")
        return self.root / container / path

    async def read(self, container: str, path: str) -> BlobData | None:
        file = self._file(container, path)

        def read() -> bytes | None:
            try:
                return file.read_bytes()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return None

        data = await asyncio.to_thread(read)
        return None if data is None else BlobData(container, path, data, file.as_uri())

    async def write(self, container: str, path: str, data: bytes) -> None:
        file = self._file(container, path)
        await asyncio.to_thread(_write_atomically, file, data)

    async def delete(self, container: str, path: str) -> None:
        file = self._file(container, path)
        await asyncio.to_thread(file.unlink, missing_ok=True)

    async def list(self, container: str, prefix: str = "") -> list[str]:
        check_container(container)
        folder = self.root / container

        def walk() -> list[str]:
            if not folder.is_dir():
                return []
            found = []
            for dirpath, dirnames, filenames in os.walk(folder):
                dirnames[:] = [d for d in dirnames if not d.startswith(_TEMP_PREFIX)]
                for name in filenames:
                    if name.startswith(_TEMP_PREFIX):
                        continue
                    relative = Path(dirpath, name).relative_to(folder).as_posix()
                    if relative.startswith(prefix):
                        found.append(relative)
            return sorted(found)

        return await asyncio.to_thread(walk)

    async def close(self) -> None:
        return None


def _write_atomically(file: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``file``, flush it to disk, and rename it over ``file``."""
    private_folder(file.parent)
    descriptor, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=file.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, file)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
