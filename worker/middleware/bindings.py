"""Input and output bindings around the handler: blobs read before it runs, outputs written once it succeeded."""

from __future__ import annotations

from typing import Any

import structlog

from worker.backends.queues import MessageTooLarge, OutcomeUnknown, writing_outputs_of
from worker.backends.storage import Storage
from worker.bindings import expressions
from worker.bindings.blobs import read_inputs
from worker.bindings.errors import Unusable
from worker.bindings.outputs import Out, send_outputs
from worker.invocation import BINDINGS_SCRATCH, Invocation
from worker.message import Poison
from worker.middleware import InvocationFailed, Middleware
from worker.model import Outcome, Result

log = structlog.get_logger("worker.bindings")


class Bindings(Middleware):
    """Gives the handler its ``Out`` values and blob inputs; sends the outputs only when the handler succeeded.

    Outputs go out before the trigger message is deleted, so a failure to
    write is a failed attempt (retried, then poisoned), never a lost output;
    an output no attempt could write (larger than its service takes, unusable)
    poisons the message at once.
    """

    def __init__(self, storage: Storage, encoding: str) -> None:
        self.storage = storage
        self.encoding = encoding

    async def before_invocation(self, invocation: Invocation) -> None:
        function = invocation.function
        if function.outputs:
            invocation.kwargs.update({binding.arg_name: Out[Any]() for binding in function.outputs})
        data: dict[str, Any] = {}
        if function.has_blob_bindings:  # binding data for blob paths: the one message's (cardinality one)
            data = invocation.scratch(BINDINGS_SCRATCH)["binding_data"] = expressions.binding_data(invocation.messages[0])
        if function.inputs:
            try:
                invocation.kwargs.update(await read_inputs(function.inputs, data, self.storage.blobs))
            except Unusable as exc:
                raise Poison(f"input binding: {exc}") from None
            except Exception as exc:
                raise InvocationFailed(f"input binding: {type(exc).__name__}: {exc}") from exc

    async def after_invocation(self, invocation: Invocation, result: Result) -> Result | None:
        function = invocation.function
        if result.outcome is not Outcome.SUCCEEDED or not function.outputs:
            return None
        values = {binding.arg_name: invocation.kwargs[binding.arg_name] for binding in function.outputs}
        # Named after the batch's first message: a retried attempt puts the same ids where the service drops repeats.
        trigger = invocation.deliveries[0].raw.id if invocation.deliveries else invocation.id
        try:
            with writing_outputs_of(function.queue_name, trigger):
                data = invocation.scratch(BINDINGS_SCRATCH).get("binding_data", {}) if function.has_blob_bindings else {}
                await send_outputs(function.outputs, values, self.storage, self.encoding, data)
        except MessageTooLarge as exc:  # no attempt could: the same output is as large every time
            log.error(
                "output is larger than its queue's service takes; the message goes to the poison queue", error=str(exc)
            )
            return Result(Outcome.POISON, f"output binding: {exc}")
        except Unusable as exc:  # no attempt could write it: a name the service refuses, a value of the wrong type
            log.error("output binding cannot be written for this message; it goes to the poison queue", error=str(exc))
            return Result(Outcome.POISON, f"output binding: {exc}")
        except OutcomeUnknown as exc:  # outputs are at-least-once: the retry sends every output again
            log.error(
                "output binding failed and may have been sent; the message will be retried, which sends its "
                "outputs again, so a consumer of them may see this one twice (see the docs' page on leases: "
                "idempotent consumers)",
                error=f"{type(exc).__name__}: {exc}",
            )
            return Result(Outcome.FAILED, f"output binding: {type(exc).__name__}: {exc}")
        except Exception as exc:
            log.error("output binding failed; the message will be retried", error=f"{type(exc).__name__}: {exc}")
            return Result(Outcome.FAILED, f"output binding: {type(exc).__name__}: {exc}")
        return None
