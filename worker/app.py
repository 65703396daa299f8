"""WorkerApp: the registry of queue-triggered functions, decorated as in Azure Functions' Python v2 model."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from worker.outputs import OutputBinding
from worker.queues.base import InvalidArgument, check_queue_name

F = TypeVar("F", bound=Callable[..., Any])

#: What a function is called when no ``@app.function_name`` names it.
_NAME_ATTR = "__worker_function_name__"
#: Output bindings declared below ``@app.queue_trigger`` wait here until it runs.
_OUTPUTS_ATTR = "__worker_queue_outputs__"


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One queue-triggered function as the host runs it."""

    name: str
    handler: Callable[..., Any]
    arg_name: str
    queue_name: str
    connection: str
    is_async: bool
    #: ``@app.queue_output`` bindings, sent only when the handler succeeds.
    outputs: tuple[OutputBinding, ...] = ()
    #: True for ``cardinality="many"``: the handler gets the received batch as a list.
    many: bool = False


class WorkerApp:
    """Holds the functions a host runs.

    ``@app.queue_trigger``, ``@app.queue_output`` and ``@app.function_name`` may
    be stacked in any order; all return the handler unchanged, so it stays
    callable in tests.
    """

    def __init__(self) -> None:
        self._specs: dict[Callable[..., Any], FunctionSpec] = {}

    @property
    def functions(self) -> list[FunctionSpec]:
        """The registered functions; ValueError if two share a name.

        Names are checked here rather than at decoration, because a name is
        final only once an ``@app.function_name`` stacked above has run.
        """
        specs = list(self._specs.values())
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise ValueError(
                    f"two functions are named {spec.name!r}; give one another name with @app.function_name"
                )
            seen.add(spec.name)
        return specs

    def queue_trigger(
        self,
        *,
        arg_name: str,
        queue_name: str,
        connection: str = "AzureWebJobsStorage",
        cardinality: str = "one",
    ) -> Callable[[F], F]:
        """Run the decorated function for each message on ``queue_name``, passed as ``arg_name``.

        ``connection`` names an environment variable or a ``connections:`` entry
        of host.yaml holding the connection string; unset means the embedded queue.
        ``cardinality="many"`` passes each received batch (up to batchSize) as a
        list instead; the handler may fail single messages with ``msg.fail(reason)``.
        """
        if cardinality not in ("one", "many"):
            raise ValueError(f"cardinality must be 'one' or 'many', got {cardinality!r}")
        try:
            check_queue_name(queue_name)
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None

        def register(handler: F) -> F:
            if arg_name not in inspect.signature(handler).parameters:
                raise TypeError(f"{handler.__qualname__} has no parameter {arg_name!r} for the queue message")
            name = getattr(handler, _NAME_ATTR, handler.__name__)
            self._specs[handler] = FunctionSpec(
                name=name,
                handler=handler,
                arg_name=arg_name,
                queue_name=queue_name,
                connection=connection,
                is_async=inspect.iscoroutinefunction(handler),
                outputs=tuple(getattr(handler, _OUTPUTS_ATTR, ())),
                many=cardinality == "many",
            )
            return handler

        return register

    def queue_output(
        self, *, arg_name: str, queue_name: str, connection: str = "AzureWebJobsStorage"
    ) -> Callable[[F], F]:
        """Give the handler an :class:`worker.Out` as ``arg_name``; what it sets goes to ``queue_name`` on success."""
        try:
            check_queue_name(queue_name)
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None
        binding = OutputBinding(arg_name, queue_name, connection)

        def bind(handler: F) -> F:
            if arg_name not in inspect.signature(handler).parameters:
                raise TypeError(f"{handler.__qualname__} has no parameter {arg_name!r} for the queue output")
            spec = self._specs.get(handler)
            if spec is None:
                setattr(handler, _OUTPUTS_ATTR, (*getattr(handler, _OUTPUTS_ATTR, ()), binding))
            else:
                self._specs[handler] = replace(spec, outputs=(*spec.outputs, binding))
            return handler

        return bind

    def function_name(self, name: str) -> Callable[[F], F]:
        """Name the function in logs and metrics (default: the Python function's name)."""

        def rename(handler: F) -> F:
            spec = self._specs.get(handler)
            if spec is None:
                setattr(handler, _NAME_ATTR, name)
            else:
                self._specs[handler] = replace(spec, name=name)
            return handler

        return rename
