"""The invocation context a handler can ask for, with the attributes of ``azure.functions.Context``.

A ``context`` parameter gets the invocation id, the function's name and folder, and attempt counts.
It has a ``traceparent`` of its own, so work it starts traces back to it.
No azure-functions import here (an extra): :mod:`worker.compat.functions` registers these classes there.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TraceContext:
    """W3C trace context of one invocation: ``trace_parent`` is ``00-<trace id>-<span id>-01``."""

    trace_parent: str = field(default_factory=lambda: f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01")
    trace_state: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RetryContext:
    """Attempts of the message: ``retry_count`` before this one, ``max_retry_count`` after the first before poison."""

    retry_count: int
    max_retry_count: int
    #: Functions fills this for retry policies only; queue triggers have none.
    exception: Any = None


class Context:
    """``azure.functions.Context`` for one invocation."""

    __slots__ = (
        "invocation_id",
        "function_name",
        "function_directory",
        "trace_context",
        "retry_context",
        "thread_local_storage",
    )

    def __init__(
        self,
        invocation_id: str,
        function_name: str,
        function_directory: str,
        retry_context: RetryContext,
        trace_context: TraceContext | None = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.function_name = function_name
        self.function_directory = function_directory
        self.retry_context = retry_context
        self.trace_context = trace_context or TraceContext()
        #: As in the Python worker: per-thread storage holding the invocation id, for libraries that look there
        #: (set here for the event loop's thread, and by the dispatcher in a sync handler's thread).
        self.thread_local_storage = threading.local()
        self.thread_local_storage.invocation_id = invocation_id

    def __repr__(self) -> str:
        return f"<Context {self.function_name} {self.invocation_id}>"
