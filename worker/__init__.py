"""A queue-trigger worker host: Azure Functions' queue trigger, runnable anywhere.

The public API is what this module exports; everything else is internal.
It includes every type a middleware hook receives, so middleware imports nothing from the runtime.
``Done``, :class:`Fate`'s former name, is still importable, with a ``DeprecationWarning``.
The shared top-level modules: :mod:`.waits`, :mod:`.dependencies`, :mod:`.model`, :mod:`.context`,
:mod:`.message`, :mod:`.invocation`, :mod:`.app`, :mod:`.spark` and :mod:`.__main__`.
The packages, lowest layer first: :mod:`.backends`, :mod:`.observability`, :mod:`.settings`,
:mod:`.bindings`, :mod:`.middleware`, :mod:`.runtime`, :mod:`.compat`, :mod:`.ops`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.app import WorkerApp
    from worker.backends.queues import QueueBackend, RawMessage
    from worker.bindings.blobs import InputStream
    from worker.bindings.outputs import Out
    from worker.context import Context
    from worker.invocation import Delivery, Invocation
    from worker.message import Poison, QueueMessage
    from worker.middleware import InvocationFailed, Middleware
    from worker.model import CheckpointFailed, Fate, Finished, FunctionSpec, Lease, Outcome, Result
    from worker.model import Done as Done  # deprecated: Fate
    from worker.settings.config import FunctionOptions

__all__ = [
    "CheckpointFailed",
    "Context",
    "Delivery",
    "Fate",
    "Finished",
    "FunctionOptions",
    "FunctionSpec",
    "InputStream",
    "Invocation",
    "InvocationFailed",
    "Lease",
    "Middleware",
    "Out",
    "Outcome",
    "Poison",
    "QueueBackend",
    "QueueMessage",
    "RawMessage",
    "Result",
    "WorkerApp",
]

#: The module that defines each exported name, imported when the name is first asked for (PEP 562) rather than with
#: the package: every ``worker`` command imports this package first, and ``worker run``'s supervisor, which runs no
#: app, would otherwise load the whole host.
_DEFINED_IN = {
    "WorkerApp": "worker.app",
    "QueueBackend": "worker.backends.queues",
    "RawMessage": "worker.backends.queues",
    "InputStream": "worker.bindings.blobs",
    "Out": "worker.bindings.outputs",
    "Context": "worker.context",
    "Delivery": "worker.invocation",
    "Invocation": "worker.invocation",
    "Poison": "worker.message",
    "QueueMessage": "worker.message",
    "InvocationFailed": "worker.middleware",
    "Middleware": "worker.middleware",
    **dict.fromkeys(["CheckpointFailed", "Fate", "Finished", "FunctionSpec", "Lease", "Outcome", "Result"], "worker.model"),
    "FunctionOptions": "worker.settings.config",
}


#: Former names, still importable with a DeprecationWarning, each with the name that replaced it.
_FORMER = {"Done": "Fate"}


def __getattr__(name: str) -> Any:
    if (current := _FORMER.get(name)) is not None:
        warnings.warn(f"worker.{name} is deprecated; use worker.{current}", DeprecationWarning, stacklevel=2)
        return __getattr__(current)
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
