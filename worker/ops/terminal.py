"""Text from a queue made safe to print for people: control characters written out, never obeyed.

A message body (or an id, a queue name) is written by whoever can put on the
queue. Printed raw, its escape sequences, BEL or CR reach the operator's
terminal: one message can clear the screen, retitle the window or overwrite a
line with a fake one. Every human-readable line of the ``worker`` command goes
through :func:`printable`; ``--json`` output is escaped by JSON itself.
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
