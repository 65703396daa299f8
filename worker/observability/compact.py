"""The host's log on a terminal: one short line per invocation, and a message's traceback once, the app's frames only.

Why: someone reading a terminal wants what their functions did. The full lines (every field, every start-up step,
``Executing`` and ``Executed``, a traceback with the host's own frames at every attempt) bury it: one message made a
screenful, a poisoned message as many whole tracebacks as it had attempts. :class:`CompactRenderer` is the last
processor of the log's chain where :func:`worker.observability.logs.configure_logging` chooses it (a terminal, or
``--log-format compact``); every other stream keeps its lines exactly. It keeps a little state (the invocations
running, the messages whose traceback was shown), bounded, since one renderer sees every line of its process.

Every line it returns passes the redaction whole, and control characters (a message body in an exception's text)
are written out, never sent to the terminal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import structlog

from worker.observability.redaction import redact

#: The host's routine INFO lines, said by a later line or by the summary table: not shown.
ROUTINE = frozenset(
    {
        "limit on open files raised",
        "local settings read",
        "config file",
        "supervisor started",
        "worker process started",
        "endpoints listening",
        "trigger queues are empty; stopping (burst mode)",
        "host stopped",
    }
)
#: Fields the compact line shows in its own way (the time, the level, the text) or not at all (the logger's name).
_NOT_SHOWN = frozenset({"timestamp", "level", "logger", "logger_name", "event"})
#: Fields a line about a function says in its prefix (the function, its message's short id) or its attempt.
_IN_PREFIX = frozenset({"function", "queue", "invocation_id", "message_id", "dequeue_count"})
#: What a line carries below it rather than as a field: a traceback, a stack.
_BELOW = frozenset({"exc_info", "exception", "stack"})
#: What a traceback shows of the host: frames in these folders are hidden (the worker package, asyncio,
#: concurrent.futures), and in threading's module, and in any site-packages or dist-packages.
_HOST_FOLDERS = tuple(
    folder + os.sep
    for module in (Path(__file__).parents[1], Path(asyncio.__file__).parent, Path(concurrent.futures.__file__).parent)
    for folder in {str(module), str(module.resolve())}
)
_HOST_FILES = frozenset({threading.__file__, str(Path(threading.__file__).resolve())})
_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
#: C0 controls but the newline and the tab, DEL, C1 controls: written out as Python writes them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: How many invocations in flight, and messages whose traceback was shown, are kept at most (the oldest go first).
REMEMBERED = 10_000


def host_frame(filename: str) -> bool:
    """Whether a traceback's frame in ``filename`` is the host's (hidden) rather than the app's."""
    return filename.startswith(_HOST_FOLDERS) or filename in _HOST_FILES or _PACKAGES.search(filename) is not None


def app_traceback(exc: BaseException) -> str:
    """``exc``'s traceback (with its causes) as Python prints it, less the host's frames: each run of them is one
    ``… N host frames hidden`` line."""
    return "".join(_chain(traceback.TracebackException.from_exception(exc)))


def _chain(exc: traceback.TracebackException) -> Iterator[str]:
    if exc.__cause__ is not None:
        yield from _chain(exc.__cause__)
        yield "\nThe above exception was the direct cause of the following exception:\n\n"
    elif exc.__context__ is not None and not exc.__suppress_context__:
        yield from _chain(exc.__context__)
        yield "\nDuring handling of the above exception, another exception occurred:\n\n"
    if exc.stack:
        yield "Traceback (most recent call last):\n"
        yield from _app_frames(exc.stack)
    yield from exc.format_exception_only()


def _app_frames(stack: Iterable[traceback.FrameSummary]) -> Iterator[str]:
    hidden = 0
    shown: list[traceback.FrameSummary] = []
    for frame in [*stack, None]:
        if frame is not None and not host_frame(frame.filename):
            if hidden:
                yield _hidden(hidden)
                hidden = 0
            shown.append(frame)
            continue
        if shown:
            yield from traceback.StackSummary.from_list(shown).format()
            shown = []
        hidden += frame is not None
    if hidden:
        yield _hidden(hidden)


def _hidden(count: int) -> str:
    return f"  … {count} host frame{'s' if count > 1 else ''} hidden\n"


def _exception(value: object) -> BaseException | None:
    """The exception a line's ``exc_info`` names (``True``: the one being handled; a tuple; an exception)."""
    if value is True:
        return sys.exc_info()[1]
    if isinstance(value, tuple):
        return value[1] if len(value) > 1 and isinstance(value[1], BaseException) else None
    return value if isinstance(value, BaseException) else None


def _remember(mapping: MutableMapping[str, Any], key: str, value: Any) -> None:
    """Keep ``key`` in ``mapping``, dropping the oldest past :data:`REMEMBERED`."""
    mapping[key] = value
    if len(mapping) > REMEMBERED:
        del mapping[next(iter(mapping))]


def _value(value: object) -> str:
    """A field's value: a plain word as it is, anything else as Python writes it (quoted, escaped)."""
    return value if isinstance(value, str) and value and not re.search(r"[\s'\"=]", value) else repr(value)


def _short(identifier: object) -> str:
    """A message's id as a compact line shows it: its first 8 characters (a UUID's first group)."""
    return str(identifier)[:8]


class CompactRenderer:
    """A structlog renderer: an event to its compact line, or ``DropEvent`` for a routine one.

    ``max_dequeue_count`` (the settings' ``maxDequeueCount``) is what an attempt is counted against (``attempt
    2/5``); a function's own value comes with its ``function loaded`` line. The invocation's line is written at its
    ``Executed``; a handler's failure said before it waits for that line where an ``Executing`` was seen (the two
    come, or not, together), and is written at once otherwise.
    """

    def __init__(self, max_dequeue_count: int | None = None) -> None:
        self._max_dequeue_count = max_dequeue_count
        self._own_max: dict[str, int] = {}
        #: What the next ``host started`` line names: each function and its queue, each storage opened.
        self._loaded: list[str] = []
        self._storage: list[str] = []
        #: Invocations whose ``Executing`` was seen: their prefix, and their failure's text once said.
        self._running: dict[str, list[str]] = {}
        #: Messages (or batch invocations) whose traceback was shown.
        self._traced: dict[str, None] = {}
        self._lock = threading.Lock()

    def __call__(self, logger: object, method: str, event: MutableMapping[str, Any]) -> str:
        name = str(event.get("logger") or getattr(logger, "name", ""))
        with self._lock:  # the event loop's lines and the handler threads' share what is kept
            text = self._host_line(event) if name == "worker" or name.startswith("worker.") else None
            if text is None:
                text = self._generic(event)
        return _CONTROL.sub(lambda match: repr(match.group())[1:-1], redact(text))

    def _host_line(self, event: MutableMapping[str, Any]) -> str | None:
        """The host's lines that have a compact form of their own; None for the rest (shown as any line)."""
        what = event.get("event")
        if event.get("level") == "info" and what in ROUTINE:
            raise structlog.DropEvent
        match what:
            case "Executing":
                _remember(self._running, str(event.get("invocation_id")), [self._prefix(event), ""])
                raise structlog.DropEvent
            case "Executed":
                return self._executed(event)
            case "handler failed":
                return self._failed(event)
            case "function loaded" | "queue storage opened" | "blob storage opened":
                self._starting(event)
                raise structlog.DropEvent
            case "host started":
                return self._started(event)
            case "message failed; it will be retried" if not event.get("visible_in"):
                raise structlog.DropEvent  # its invocation's line said it failed, and it is visible again at once
            case "message failed; it will be retried":
                return f"{_now()} {self._prefix(event)} retried in {event['visible_in']} s"
            case "message moved to the poison queue":
                return f"{_now()} ERROR {self._prefix(event)} moved to {event.get('poison_queue')}: {event.get('reason')}"
            case "worker process exited" if event.get("exit_code") == 0:
                raise structlog.DropEvent
            case "supervisor stopped" if not event.get("restarts") and not any(event.get("exits") or ()):
                raise structlog.DropEvent
        return None

    def _starting(self, event: MutableMapping[str, Any]) -> None:
        if event["event"] != "function loaded":
            self._storage.append(str(event.get("storage")))
            return
        function = str(event.get("function"))
        if isinstance(own := event.get("max_dequeue_count"), int):
            self._own_max[function] = own
        self._loaded.append(f"{function} on queue {event.get('queue')}")

    def _started(self, event: MutableMapping[str, Any]) -> str:
        count = event.get("functions")
        functions = "; ".join(self._loaded) or f"{count} function{'' if count == 1 else 's'}"
        storage = "".join(f"; {each}" for each in dict.fromkeys(self._storage))
        self._loaded, self._storage = [], []
        burst = ", burst" if event.get("burst") else ""
        return f"{_now()} host started (pid {event.get('pid')}{burst}): {functions}{storage}"

    def _executed(self, event: MutableMapping[str, Any]) -> str:
        prefix, failure = self._running.pop(str(event.get("invocation_id")), None) or [self._prefix(event), ""]
        milliseconds = float(event.get("duration_ms") or 0)
        took = f"{milliseconds / 1000:.2f} s" if milliseconds >= 1000 else f"{milliseconds:.1f} ms"
        return f"{_now()} {prefix} {event.get('outcome')} {took}{self._attempt(event)}{failure}"

    def _failed(self, event: MutableMapping[str, Any]) -> str:
        """A handler's failure: its type and text, and its traceback (the app's frames) at its message's first."""
        failure = f": {event.get('error')}"
        key = str(event.get("message_id") or event.get("invocation_id"))
        exc = _exception(event.get("exc_info"))
        if key not in self._traced and exc is not None:
            _remember(self._traced, key, None)
            failure += "\n" + app_traceback(exc).rstrip("\n")
        running = self._running.get(str(event.get("invocation_id")))
        if running is not None:  # said with the invocation's line, at its Executed
            running[1] = failure
            raise structlog.DropEvent
        return f"{_now()} {self._prefix(event)} failed{self._attempt(event)}{failure}"

    def _attempt(self, event: MutableMapping[str, Any]) -> str:
        count = event.get("dequeue_count")
        if count is None:
            return ""
        most = self._own_max.get(str(event.get("function")), self._max_dequeue_count)
        return f", attempt {count}/{most}" if most else f", attempt {count}"

    def _prefix(self, event: MutableMapping[str, Any]) -> str:
        """The function and its message's short id (a batch's: its invocation's), as each line about it begins."""
        function = event.get("function")
        if function is None:
            return ""
        running = self._running.get(str(event.get("invocation_id")))
        if running is not None:
            return running[0]
        identifier = event.get("message_id") or event.get("invocation_id")
        return f"{function} {_short(identifier)}" if identifier else str(function)

    def _generic(self, event: MutableMapping[str, Any]) -> str:
        """Any other line: the time, its level but INFO, its function and message, its text, its fields, and the
        traceback or stack it carries, whole."""
        level = str(event.get("level", "info"))
        parts = [_now(), "" if level == "info" else level.upper(), self._prefix(event), str(event.get("event"))]
        below = [str(event[key]) for key in ("stack", "exception") if event.get(key)]
        if (exc := _exception(event.get("exc_info"))) is not None:
            below.append("".join(traceback.format_exception(exc)).rstrip("\n"))
        prefixed = event.get("function") is not None
        for key, value in event.items():
            if key in _NOT_SHOWN or key in _BELOW or key.startswith("_") or (prefixed and key in _IN_PREFIX):
                continue
            parts.append(f"{key}={_value(value)}")
        return "\n".join([" ".join(part for part in parts if part), *below])


def _now() -> str:
    return time.strftime("%H:%M:%S")
