"""A queue-trigger worker host: Azure Functions' queue trigger, runnable anywhere.

The public API is what this module exports; everything else is internal.
"""

from worker.app import WorkerApp
from worker.bindings.blobs import InputStream
from worker.bindings.outputs import Out
from worker.context import Context
from worker.message import Poison, QueueMessage
from worker.middleware import InvocationFailed, Middleware

__all__ = ["Context", "InputStream", "InvocationFailed", "Middleware", "Out", "Poison", "QueueMessage", "WorkerApp"]
