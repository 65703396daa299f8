"""WorkerApp: the registry of queue-triggered functions, decorated as in Azure Functions' Python v2 model."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from worker.bindings.blobs import BlobInput, BlobOutput, check_blob_path, input_kind
from worker.bindings.outputs import OutputBinding
from worker.bindings.types import data_kind
from worker.middleware import Middleware
from worker.model import FunctionSpec
from worker.settings.config import parse_duration
from worker.settings.retry import parse_retry

F = TypeVar("F", bound=Callable[..., Any])

#: What a function is called when no ``@app.function_name`` names it.
_NAME_ATTR = "__worker_function_name__"
#: Output bindings declared below ``@app.queue_trigger`` wait here until it runs.
_OUTPUTS_ATTR = "__worker_queue_outputs__"
#: Input bindings declared below ``@app.queue_trigger`` wait here until it runs.
_INPUTS_ATTR = "__worker_inputs__"
#: A retry policy declared below ``@app.queue_trigger`` waits here until it runs.
_RETRY_ATTR = "__worker_retry__"


class WorkerApp:
    """Holds the functions a host runs.

    ``@app.queue_trigger``, ``@app.queue_output`` and ``@app.function_name`` may
    be stacked in any order; all return the handler unchanged, so it stays
    callable in tests.

    A decorator used wrongly (a missing parameter, a path without a
    container, blob bindings on a batch) does not raise at import: the
    handler is not registered and the problem is kept in :attr:`problems`,
    so that a module with several such mistakes has them all listed when
    the host refuses to start, not the first one per run.
    """

    def __init__(self) -> None:
        self._specs: dict[Callable[..., Any], FunctionSpec] = {}
        self._middleware: list[Middleware] = []
        self._problems: list[str] = []
        #: Handlers with a problem: never registered, whatever decorators run on them later.
        self._refused: set[Callable[..., Any]] = set()
        #: Functions of the app's source that this host does not run, one line each with why (another trigger,
        #: switched off with ``AzureWebJobs.<name>.Disabled``); the loader fills it, the console shows it.
        self.not_run: tuple[str, ...] = ()
        #: Functions of a Functions app whose code gives a retry policy that Functions does not apply to a queue
        #: trigger (``@app.retry``, function.json's ``retry``): not applied here either; the host says so at start.
        self.ignored_retry: tuple[str, ...] = ()

    def add_middleware(self, middleware: Middleware) -> None:
        """Run ``middleware`` (a :class:`worker.Middleware`) in every host that runs this app, after the host's own."""
        if not isinstance(middleware, Middleware):
            raise TypeError(f"expected a worker.Middleware instance, got {type(middleware).__name__}")
        self._middleware.append(middleware)

    @property
    def middleware(self) -> list[Middleware]:
        """The middleware added with :meth:`add_middleware`, in order."""
        return list(self._middleware)

    @property
    def problems(self) -> list[str]:
        """Why some decorated handlers cannot be functions, one line each; the host refuses to start with them."""
        return list(self._problems)

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
                raise ValueError(f"two functions are named {spec.name!r}; give one another name with @app.function_name")
            seen.add(spec.name)
        return specs

    def queue_trigger(
        self,
        *,
        arg_name: str,
        queue_name: str,
        connection: str | None = None,
        cardinality: str = "one",
        settings: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Run the decorated function for each message on ``queue_name``, passed as ``arg_name``.

        ``connection`` names a connection setting, resolved as Azure Functions
        does (``AzureWebJobs<X>``, then ``<X>``; environment, then host.yaml
        ``connections:``); a named one that resolves to nothing is refused at
        start. Unset means ``AzureWebJobsStorage`` when that is set, else the
        embedded queue. The parameter annotated ``str`` or ``bytes`` gets the
        body as that type, as in the Functions Python worker; otherwise a
        :class:`QueueMessage`. ``cardinality="many"`` passes each received
        batch (up to batchSize) as a list instead; the handler may fail single
        messages with ``msg.fail(reason)``.

        Other keyword arguments are options of the part of the host that reads
        them, which declares them; one that nothing declares is refused at start,
        by name. The host's own: ``channel`` receives from one
        channel of the queue only, where the backend has channels (OCI Queue);
        elsewhere it is refused at start. ``checkpoints=True`` lets the handler
        replace its message's content as it works (``msg.checkpoint``), for
        work that resumes where a crashed attempt got to; a backend that
        cannot change content (OCI Queue) is refused at start. ``spark=True``
        says the handler runs Spark: the host then starts the Spark session in
        the background as it starts, so that the first message does not pay for
        the JVM and the cold first jobs (a handler without it can still call
        ``spark.session()``, which then starts Spark at its first call).
        ``settings`` are the function's own settings given with its code (by
        their HostConfig names: ``batch_size``, ``function_timeout`` ...), as a
        converted SAM template gives them; host.yaml's ``functions.<name>``
        section wins over them.
        """
        try:
            if cardinality not in ("one", "many"):
                raise ValueError(f"cardinality must be 'one' or 'many', got {cardinality!r}")
            _check_named(queue_name)
        except ValueError as exc:
            return self._refusing(f"queue_trigger: {exc}")

        @self._checked("queue_trigger")
        def register(handler: F) -> F:
            if arg_name not in inspect.signature(handler).parameters:
                raise TypeError(f"has no parameter {arg_name!r} for the queue message")
            name = getattr(handler, _NAME_ATTR, handler.__name__)
            inputs = tuple(getattr(handler, _INPUTS_ATTR, ()))
            outputs = tuple(getattr(handler, _OUTPUTS_ATTR, ()))
            if cardinality == "many" and (inputs or any(isinstance(b, BlobOutput) for b in outputs)):
                raise ValueError("blob bindings need cardinality 'one' (a path names one message)")
            trigger_kind = "object" if cardinality == "many" else data_kind(handler, arg_name)
            if options.get("checkpoints") and trigger_kind != "object":
                raise ValueError(
                    f"checkpoints=True needs the QueueMessage itself as {arg_name!r} "
                    f"(it is annotated {trigger_kind}, which gets the body only)"
                )
            self._specs[handler] = FunctionSpec(
                name=name,
                handler=handler,
                arg_name=arg_name,
                queue_name=queue_name,
                connection=connection,
                is_async=inspect.iscoroutinefunction(handler),
                outputs=outputs,
                inputs=inputs,
                many=cardinality == "many",
                trigger_kind=trigger_kind,
                wants_context="context" in inspect.signature(handler).parameters and arg_name != "context",
                directory=_directory(handler),
                retry=getattr(handler, _RETRY_ATTR, None),
                settings=dict(settings or {}),
                extras=dict(options),
            )
            return handler

        return register

    def retry(
        self,
        strategy: str,
        max_retry_count: str | int | None = None,
        delay_interval: str | None = None,
        minimum_interval: str | None = None,
        maximum_interval: str | None = None,
    ) -> Callable[[F], F]:
        """The function's retry policy, as ``azure.functions.FunctionApp.retry`` takes it.

        ``strategy`` is ``fixed_delay`` (``delay_interval``) or
        ``exponential_backoff`` (``minimum_interval``, ``maximum_interval``),
        intervals as ``hh:mm:ss``. A failed message is released with the
        policy's delay for its attempt; attempts are counted by
        ``maxDequeueCount``, so ``max_retry_count`` has no effect.
        """
        try:
            policy = parse_retry(
                {
                    "strategy": strategy,
                    "max_retry_count": max_retry_count,
                    "delay_interval": delay_interval,
                    "minimum_interval": minimum_interval,
                    "maximum_interval": maximum_interval,
                },
                parse_duration,
            )
        except ValueError as exc:
            return self._refusing(f"retry: {exc}")
        return lambda handler: self._set(handler, _RETRY_ATTR, retry=policy)

    def queue_output(
        self, *, arg_name: str, queue_name: str, connection: str | None = None, channel: str | None = None
    ) -> Callable[[F], F]:
        """Give the handler an :class:`worker.Out` as ``arg_name``; what it sets goes to ``queue_name`` on success.

        ``channel`` puts the messages on that channel of the queue, where the backend has channels (OCI Queue).
        """
        try:
            _check_named(queue_name)
        except ValueError as exc:
            return self._refusing(f"queue_output {arg_name!r}: {exc}")
        return self._bind(OutputBinding(arg_name, queue_name, connection, channel), "queue output")

    def blob_output(self, *, arg_name: str, path: str, connection: str | None = None) -> Callable[[F], F]:
        """Give the handler an :class:`worker.Out` as ``arg_name``; what it sets (str or bytes) is written on success.

        ``path`` is ``container/blob``, with binding expressions (``{queueTrigger}``,
        ``{id}``, JSON body properties, ``{rand-guid}``, ``{DateTime}``, ``%Setting%``)
        resolved for each message. The blob is written after the handler
        returns and before the trigger message is deleted.
        """
        try:
            check_blob_path(path)
        except ValueError as exc:
            return self._refusing(f"blob_output {arg_name!r}: {exc}")
        return self._bind(BlobOutput(arg_name, path, connection), "blob output")

    def blob_input(
        self, *, arg_name: str, path: str, connection: str | None = None, data_type: str | None = None
    ) -> Callable[[F], F]:
        """Read the blob at ``path`` before the handler runs and pass it as ``arg_name``; None when it does not exist.

        The parameter's annotation chooses the type, as in the Functions
        Python worker: ``str``, ``bytes``, else an :class:`worker.InputStream`;
        an unannotated parameter follows ``data_type`` (``"string"``/``"binary"``).
        """
        try:
            check_blob_path(path)
        except ValueError as exc:
            return self._refusing(f"blob_input {arg_name!r}: {exc}")

        @self._checked(f"blob_input {arg_name!r}")
        def bind(handler: F) -> F:
            kind = input_kind(handler, arg_name, data_type)
            return self._bind(BlobInput(arg_name, path, connection, kind), "blob input")(handler)

        return bind

    def _bind(self, binding: OutputBinding | BlobOutput | BlobInput, what: str) -> Callable[[F], F]:
        """Add ``binding`` to the handler's function, whether ``@app.queue_trigger`` ran already or runs later."""
        attr = _INPUTS_ATTR if isinstance(binding, BlobInput) else _OUTPUTS_ATTR

        @self._checked(f"{what.replace(' ', '_')} {binding.arg_name!r}")
        def bind(handler: F) -> F:
            if binding.arg_name not in inspect.signature(handler).parameters:
                raise TypeError(f"has no parameter {binding.arg_name!r} for the {what}")
            spec = self._specs.get(handler)
            if spec is None:
                setattr(handler, attr, (*getattr(handler, attr, ()), binding))
            elif spec.many and not isinstance(binding, OutputBinding):
                raise ValueError("blob bindings need cardinality 'one' (a path names one message)")
            elif isinstance(binding, BlobInput):
                self._specs[handler] = replace(spec, inputs=(*spec.inputs, binding))
            else:
                self._specs[handler] = replace(spec, outputs=(*spec.outputs, binding))
            return handler

        return bind

    def function_name(self, name: str) -> Callable[[F], F]:
        """Name the function in logs and metrics (default: the Python function's name)."""

        return lambda handler: self._set(handler, _NAME_ATTR, name=name)

    def _refuse(self, handler: Callable[..., Any], problem: str) -> None:
        """Keep ``problem`` against ``handler``, which is then never registered."""
        python_name = getattr(handler, "__name__", repr(handler))
        name = getattr(handler, _NAME_ATTR, python_name)
        self._problems.append(f"function {name}{f' ({python_name})' if python_name != name else ''}: {problem}")
        self._refused.add(handler)
        self._specs.pop(handler, None)

    def _refusing(self, problem: str) -> Callable[[F], F]:
        """A decorator for one whose arguments are wrong: it records ``problem`` against the handler it gets."""

        def refuse(handler: F) -> F:
            self._refuse(handler, problem)
            return handler

        return refuse

    def _checked(self, what: str) -> Callable[[Callable[[F], F]], Callable[[F], F]]:
        """Wrap a decorator so that what it raises for a handler is recorded as a problem (``what`` said it), and a
        handler refused already stays out of the registry."""

        def wrap(decorate: Callable[[F], F]) -> Callable[[F], F]:
            def checked(handler: F) -> F:
                try:
                    decorate(handler)
                except (TypeError, ValueError) as exc:
                    self._refuse(handler, f"{what}: {exc}")
                if handler in self._refused:
                    self._specs.pop(handler, None)
                return handler

            return checked

        return wrap

    def _set(self, handler: F, attr: str, **field: Any) -> F:
        """Set one field of the handler's function, whether ``@app.queue_trigger`` ran already or runs later (then
        the value waits on the handler as ``attr``)."""
        spec = self._specs.get(handler)
        if spec is None:
            [value] = field.values()
            setattr(handler, attr, value)
        else:
            self._specs[handler] = replace(spec, **field)
        return handler


def _check_named(queue_name: str) -> None:
    """A queue name must be given; whether the service accepts it depends on the backend, checked at start."""
    if not isinstance(queue_name, str) or not queue_name.strip():
        raise ValueError(f"queue_name must be a non-empty string, got {queue_name!r}")


def _directory(handler: Callable[..., Any]) -> str:
    """The folder of the module that defines ``handler`` (the app's folder), or the current one."""
    module = sys.modules.get(handler.__module__)
    file = getattr(module, "__file__", None)
    return str(Path(file).resolve().parent) if file else os.getcwd()
