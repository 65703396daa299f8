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
    in_string = False
    #: Index of the last comma outside a string with only blanks or comments after it so far.
    pending_comma = -1
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if in_string:
            if char == "\\":
                i += 2
                continue
            if char == '"':
                in_string = False
            i += 1
            continue
        if text.startswith("//", i):
            stop = text.find("\n", i)
            stop = end if stop < 0 else stop
            out[i:stop] = " " * (stop - i)
            i = stop
            continue
        if text.startswith("/*", i):
            stop = text.find("*/", i + 2)
            if stop < 0:
                line = text.count("\n", 0, i) + 1
                raise JsonFileError("comment not closed", line, i - text.rfind("\n", 0, i))
            for j in range(i, stop + 2):
                if out[j] != "\n":
                    out[j] = " "
            i = stop + 2
            continue
        if char in "}]" and pending_comma >= 0:
            out[pending_comma] = " "
        if not char.isspace():
            pending_comma = i if char == "," else -1
        if char == '"':
            in_string = True
        i += 1
    return "".join(out)
