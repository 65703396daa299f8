"""A queue-trigger worker host: Azure Functions' queue trigger, runnable anywhere.

The public API is what this module exports; everything else is internal. It
includes the types middleware hooks receive (``Invocation``, ``FunctionSpec``,
``Result``, ``Outcome``, ``Finished``, ``Done``), so that a middleware author
imports nothing from the runtime.
"""

from worker.app import WorkerApp
from worker.bindings.blobs import InputStream
from worker.bindings.outputs import Out
from worker.context import Context
from worker.invocation import Invocation
from worker.message import Poison, QueueMessage
from worker.middleware import InvocationFailed, Middleware
from worker.model import CheckpointFailed, Done, Finished, FunctionSpec, Outcome, Result

__all__ = [
    "CheckpointFailed", "Context", "Done", "Finished", "FunctionSpec", "InputStream", "Invocation", "InvocationFailed",
    "Middleware", "Out", "Outcome", "Poison", "QueueMessage", "Result", "WorkerApp",
]
