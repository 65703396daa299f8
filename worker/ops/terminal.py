"""Text from a queue made safe to print for people: control characters written out, never obeyed.

Whoever can put on a queue writes its message bodies, ids and names.
Printed raw, escape sequences could clear the screen or fake a line.
Every human-readable line of ``worker`` goes through :func:`printable`; JSON escapes ``--json`` output itself.
"""

from __future__ import annotations

import re

#: C0 controls, DEL, C1 controls (a terminal obeys 0x9b as ESC [), and the lone surrogates that stand for bytes
#: that were not UTF-8 (printing one would fail, not show it).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with each unsafe character written as a Python string literal writes it (``\\x1b``, ``\\r``, ``\\n``).

    Everything else, printable Unicode included, is kept as it is, so that bodies stay readable; the exact
    text is what ``--json`` gives.
    """
    return _UNSAFE.sub(lambda match: repr(match.group())[1:-1], text)
