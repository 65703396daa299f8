"""Owner-only files and folders for the embedded queue and blob store; looser ones reported at start.

The queue file and blob folder hold every message and blob, so new ones are private whatever the umask.
Folders are 0700, files 0600; the queue file is 0600 before SQLite opens it, so ``-wal`` and ``-shm`` follow.
What exists already is left alone: a shared volume may be group-writable on purpose.
Start-up reports it, with the command that makes it private; it is not refused.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: The mode of every file and folder the embedded backend creates.
FILE_MODE = 0o600
FOLDER_MODE = 0o700
#: Read and write for the group and for others: what makes an existing file or folder reported.
SHARED_BITS = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
#: The files SQLite keeps beside a queue file in WAL mode.
SIDECARS = ("-wal", "-shm")


def private_folder(path: Path) -> None:
    """Make ``path`` and every missing folder above it, each 0700; folders that exist keep their mode.

    ``Path.mkdir(parents=True, mode=...)`` gives only the last folder the mode, the parents the umask's.
    """
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:  # another process made it meanwhile: theirs is made the same way
            continue
        os.chmod(folder, FOLDER_MODE)


def private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 when it does not exist (its folder too); a file that exists is left alone."""
    private_folder(path.parent)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, FILE_MODE)
    finally:
        os.close(descriptor)


def queue_files(path: Path) -> list[Path]:
    """The queue file and the files SQLite keeps beside it."""
    return [path, *(path.with_name(path.name + suffix) for suffix in SIDECARS)]


@dataclass(frozen=True)
class Exposed:
    """A file or folder of the embedded backend that other users can read or write."""

    path: Path
    mode: int
    is_folder: bool

    @property
    def who(self) -> str:
        """Who can do what, as ``ls -l`` would show it: "group can read, others can read"."""
        found = []
        for name, read, write in (("group", stat.S_IRGRP, stat.S_IWGRP), ("others", stat.S_IROTH, stat.S_IWOTH)):
            can = [verb for verb, bit in (("read", read), ("write", write)) if self.mode & bit]
            if can:
                found.append(f"{name} can {' and '.join(can)}")
        return ", ".join(found)

    @property
    def fix(self) -> str:
        """The command that makes it owner-only."""
        return f"chmod {FOLDER_MODE if self.is_folder else FILE_MODE:o} {self.path}"


def exposed(path: Path) -> Exposed | None:
    """What other users can do with ``path``, or None when it is private or does not exist."""
    try:
        status = path.stat()
    except OSError:  # missing, or not reachable: then nobody else reaches it through this path either
        return None
    mode = stat.S_IMODE(status.st_mode)
    return Exposed(path, mode, stat.S_ISDIR(status.st_mode)) if mode & SHARED_BITS else None
