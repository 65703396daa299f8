"""Binding expressions in blob paths and queue names, resolved as Azure Functions resolves them.

``%Setting%`` is an app setting, resolved once at load, so a missing one is refused at start.
``{name}`` is the trigger message's binding data, resolved per invocation, case-insensitively.
A JSON body's property wins over the message's own name, as in the WebJobs SDK.
``{rand-guid}`` and ``{DateTime}`` need no message; times read ``yyyy-MM-ddTHH-mm-ssZ`` (no colons).
A ``{name}`` the message lacks is an :class:`ExpressionError`, which fails that attempt.
docs/functions.md lists every name and format.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol


class ExpressionError(ValueError):
    """A binding expression cannot be resolved; the message names the expression."""


class _Message(Protocol):
    id: str
    dequeue_count: int
    insertion_time: datetime | None
    expiration_time: datetime | None
    time_next_visible: datetime | None

    @property
    def pop_receipt(self) -> str | None: ...

    def get_body(self) -> bytes: ...


_SETTING = re.compile(r"%([^%]+)%")
_TOKEN = re.compile(r"\{([^{}]*)\}")
#: The path format of a time, as the WebJobs SDK writes {DateTime}.
PATH_TIME_FORMAT = "yyyy-MM-ddTHH-mm-ssZ"


def setting_names(template: str) -> list[str]:
    """The app settings ``template`` refers to as ``%NAME%``, in order."""
    return _SETTING.findall(template)


def resolve_settings(template: str, settings: Mapping[str, str]) -> str:
    """``template`` with every ``%NAME%`` replaced from ``settings``; ExpressionError names a missing one."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in settings:
            raise ExpressionError(f"{template!r} refers to the app setting {name}, which is not set")
        return settings[name]

    return _SETTING.sub(value, template)


def binding_data(message: _Message) -> dict[str, Any]:
    """The values a ``{name}`` may take from ``message``: its metadata, overridden by its JSON body's properties."""
    body = message.get_body()
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        parsed = None
    system = {
        "queuetrigger": body.decode("utf-8", errors="replace"),
        "id": message.id,
        "dequeuecount": message.dequeue_count,
        "insertiontime": message.insertion_time,
        "expirationtime": message.expiration_time,
        "nextvisibletime": message.time_next_visible,
        "popreceipt": message.pop_receipt,
    }
    data = {k: v for k, v in system.items() if v is not None}
    if isinstance(parsed, dict):
        data.update({str(k).lower(): v for k, v in parsed.items()})
    return data


def resolve(template: str, data: Mapping[str, Any], now: datetime | None = None) -> str:
    """``template`` with every ``{name}`` replaced from ``data`` (from :func:`binding_data`) or the system values."""
    if template.count("{") != template.count("}"):
        raise ExpressionError(f"{template!r} has an unmatched brace")

    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if not expression:
            raise ExpressionError(f"{template!r} has an empty {{}} expression")
        name, _, fmt = expression.partition(":")
        key = name.strip().lower()
        if key == "rand-guid":
            return _guid(uuid.uuid4(), fmt, template)
        if key == "datetime" and "datetime" not in data:
            return format_time(now or datetime.now(UTC), fmt or PATH_TIME_FORMAT)
        found = _lookup(data, key)
        if found is _MISSING:
            names = ", ".join(sorted(data)) or "none"
            raise ExpressionError(f"{template!r}: the message has no value for {{{expression}}} (binding data: {names})")
        if isinstance(found, datetime):
            return format_time(found, fmt or PATH_TIME_FORMAT)
        if isinstance(found, (dict, list)):
            raise ExpressionError(f"{template!r}: {{{expression}}} is a JSON {type(found).__name__}, not a value")
        if found is None or isinstance(found, bool):  # would write None.txt or True.txt: never what was meant
            raise ExpressionError(f"{template!r}: {{{expression}}} is {json.dumps(found)}, not a name")
        return str(found)

    return _TOKEN.sub(value, template)


_MISSING = object()


def _lookup(data: Mapping[str, Any], key: str) -> Any:
    """``key`` in ``data``, following dots into JSON objects (``order.id``); case-insensitive."""
    if key in data:
        return data[key]
    head, dot, rest = key.partition(".")
    if not dot or head not in data:
        return _MISSING
    current: Any = data[head]
    for part in rest.split("."):
        if not isinstance(current, dict):
            return _MISSING
        lowered = {str(k).lower(): v for k, v in current.items()}
        if part not in lowered:
            return _MISSING
        current = lowered[part]
    return current


def _guid(value: uuid.UUID, fmt: str, template: str) -> str:
    """A GUID in .NET's standard formats: D (default), N, B, P."""
    text = str(value)
    match (fmt or "D").upper():
        case "D":
            return text
        case "N":
            return value.hex
        case "B":
            return "{" + text + "}"
        case "P":
            return "(" + text + ")"
    raise ExpressionError(f"{template!r}: rand-guid format {fmt!r} is not one of N, D, B, P")


#: .NET custom date and time format specifiers this host understands, longest first.
_DOTNET = [
    ("yyyy", "%Y"),
    ("yy", "%y"),
    ("MM", "%m"),
    ("dd", "%d"),
    ("HH", "%H"),
    ("hh", "%I"),
    ("mm", "%M"),
    ("ss", "%S"),
    ("fff", "%f3"),
    ("tt", "%p"),
]


def format_time(moment: datetime, fmt: str) -> str:
    """``moment`` (in UTC) in a .NET custom format: ``yyyy MM dd HH hh mm ss fff tt``; other characters are literal.

    Text in single quotes is literal too, as in .NET.
    """
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    out: list[str] = []
    i = 0
    while i < len(fmt):
        if fmt[i] == "'":
            end = fmt.find("'", i + 1)
            end = len(fmt) if end < 0 else end
            out.append(fmt[i + 1 : end])
            i = end + 1
            continue
        for token, code in _DOTNET:
            if fmt.startswith(token, i):
                out.append(f"{moment.microsecond // 1000:03d}" if code == "%f3" else moment.strftime(code))
                i += len(token)
                break
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def unset_settings(what: str, text: str, environ: Mapping[str, str]) -> str | None:
    """The problem with ``%SETTING%`` references in ``text`` (a queue name, a path) that are not set, or None."""
    missing = [name for name in setting_names(text) if name not in environ]
    if not missing:
        return None
    names = ", ".join(missing)
    plural = len(missing) > 1
    setting, verb = ("app settings", "are") if plural else ("app setting", "is")
    return f"the {what} {text!r} refers to the {setting} {names}, which {verb} not set"
