"""The fenced code blocks of the documentation (docs/*.md, README.md), with what their page says to do with them.

A block may be preceded, on the line just above its fence, by a marker:

- ``<!-- docs-test: skip (REASON) -->``: not run, for the reason given (it installs packages, runs until stopped,
  needs a cloud account, or is run by another test, which the reason names);
- ``<!-- docs-test: file NAME -->``: written as NAME in the page's folder, for the blocks after it;
- ``<!-- docs-test: init-file NAME -->``: the file NAME exactly as ``worker init`` writes it.

Without a marker, ``python``, ``sh``/``bash``, ``yaml`` and ``json`` blocks are run (tests/docs/test_code_blocks.py);
other blocks (``text``, output, URL forms) are shown, not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RUN = frozenset({"python", "sh", "bash", "yaml", "json"})
MARKER = re.compile(r"^<!-- docs-test: (skip \((?P<reason>.+)\)|file (?P<file>\S+)|init-file (?P<init>\S+)) -->$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    skip: str | None = None
    file: str | None = None
    init_file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("**/*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` (fences at the start of a line), with its marker."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    page = str(path.relative_to(REPO))
    while index < len(lines):
        fence = re.match(r"^(`{3,})(\S*)", lines[index])
        if not fence:
            if lines[index].startswith("<!-- docs-test:") and not MARKER.match(lines[index]):
                raise ValueError(f"{page}:{index + 1}: a docs-test marker of no known form: {lines[index]}")
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith(fence.group(1)))
        marker = MARKER.match(lines[index - 1]) if index else None
        if index and lines[index - 1].startswith("<!-- docs-test:") and not marker:
            raise ValueError(f"{page}:{index}: a docs-test marker of no known form: {lines[index - 1]}")
        found.append(
            Block(
                page,
                index + 1,
                fence.group(2),
                "\n".join(lines[index + 1 : end]) + "\n",
                skip=marker and marker.group("reason"),
                file=marker and marker.group("file"),
                init_file=marker and marker.group("init"),
            )
        )
        index = end + 1
    return found
