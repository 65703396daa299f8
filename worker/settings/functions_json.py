"""A Functions app's JSON files (host.json, local.settings.json) as Functions reads them: comments, trailing commas.

Anything else that is not JSON is a syntax error naming line and column.
A lenient reader (YAML) could take it to mean something else.
Comments and trailing commas become spaces, so the parser's positions are the file's.
"""

from __future__ import annotations

import json
from typing import Any

#: Why a settings file nested deeper than Python's recursion limit is refused: parsers and the checks after them
#: recurse per level, and no setting nests more than a few.
TOO_DEEP = "nested too deeply to read: settings nest a few levels at most"


class JsonFileError(ValueError):
    """The file is not valid JSON (comments and trailing commas aside)."""

    def __init__(self, problem: str, line: int, column: int) -> None:
        super().__init__(f"{problem} (line {line}, column {column})")
        self.problem, self.line, self.column = problem, line, column


def parse(text: str) -> Any:
    """The value ``text`` holds; JsonFileError for a syntax error."""
    plain = without_comments(text)
    try:
        return json.loads(plain)
    except json.JSONDecodeError as exc:
        raise JsonFileError(exc.msg, exc.lineno, exc.colno) from None


def without_comments(text: str) -> str:
    """``text`` with its comments and trailing commas blanked out (newlines kept), strings left alone."""
    out = list(text)
    #: Index of the last comma outside a string with only blanks or comments after it so far.
    pending_comma = -1
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if char == '"':
            pending_comma = -1
            i = _after_string(text, i + 1)
        elif text.startswith("//", i):
            i = _blank_line_comment(text, out, i)
        elif text.startswith("/*", i):
            i = _blank_block_comment(text, out, i)
        else:
            if char in "}]" and pending_comma >= 0:
                out[pending_comma] = " "
            if not char.isspace():
                pending_comma = i if char == "," else -1
            i += 1
    return "".join(out)


def _after_string(text: str, i: int) -> int:
    """Where the string whose text starts at ``i`` ends (past its closing quote), escapes skipped."""
    end = len(text)
    while i < end:
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return i


def _blank_line_comment(text: str, out: list[str], i: int) -> int:
    """Blank the ``//`` comment at ``i`` in ``out`` up to its line's end; where scanning goes on."""
    stop = text.find("\n", i)
    stop = len(text) if stop < 0 else stop
    out[i:stop] = " " * (stop - i)
    return stop


def _blank_block_comment(text: str, out: list[str], i: int) -> int:
    """Blank the ``/* */`` comment at ``i`` in ``out``, newlines kept; where scanning goes on."""
    stop = text.find("*/", i + 2)
    if stop < 0:
        line = text.count("\n", 0, i) + 1
        raise JsonFileError("comment not closed", line, i - text.rfind("\n", 0, i))
    for j in range(i, stop + 2):
        if out[j] != "\n":
            out[j] = " "
    return stop + 2
