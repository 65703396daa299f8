"""Run an ``azure.functions.FunctionApp`` (the Functions Python v2 model) on this host, unchanged.

An app written for Azure Functions should move here, or run in both places, without a rewrite.
:func:`from_function_app` registers each queue-triggered function into a :class:`~worker.app.WorkerApp`.
Its handler calls the function as the Functions Python worker would; docs/functions.md gives the mapping.
Other triggers go to :attr:`ConvertedApp.skipped`, disabled functions to :attr:`ConvertedApp.disabled`.
What cannot run goes to :attr:`ConvertedApp.problems`, one line each, so all are refused at once.
It imports azure-functions (an extra); :mod:`worker.compat.loading` imports it only for such apps.
"""

from __future__ import annotations

import collections.abc
import inspect
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import azure.functions as func
from azure.functions.blob import InputStream as _BlobStream
from azure.functions.decorators.core import Binding, BindingDirection, DataType
from azure.functions.decorators.function_app import Function, FunctionRegister
from azure.functions.queue import QueueMessage as _FullQueueMessage

from worker.app import WorkerApp
from worker.bindings import blobs as blob_bindings
from worker.bindings import expressions
from worker.bindings.errors import UnusableOutput
from worker.bindings.outputs import Out
from worker.compat.converted import RETURN, RETURN_ARG, ConvertedApp, SkippedFunction
from worker.context import Context, RetryContext, TraceContext
from worker.dependencies import fall_back
from worker.message import QueueMessage
from worker.settings.connections import Service

QUEUE_TRIGGER = "queueTrigger"
#: A Functions binding without a connection uses this one (the storage extension's default).
DEFAULT_CONNECTION = "AzureWebJobsStorage"
QUEUE = "queue"
BLOB = "blob"

# worker.Out and worker.Context pass isinstance checks against func.Out and func.Context, as the Functions worker's own do.
func.Out.register(Out)
func.Context.register(Context)


def register_private_contexts() -> bool:
    """Make the host's trace and retry contexts pass isinstance checks against azure.functions' own ABCs, as the
    Functions worker's do; those live in its private ``_abc`` module. Without them (another azure-functions) the
    contexts work the same and only such a check fails, after one warning; returns whether they were registered."""
    try:
        from azure.functions import _abc

        abcs = (_abc.TraceContext, _abc.RetryContext)
        if not all(callable(getattr(abc, "register", None)) for abc in abcs):
            raise ImportError("TraceContext or RetryContext is not an ABC")
    except (ImportError, AttributeError) as exc:
        fall_back(
            "azure-functions",
            f"azure.functions._abc: {exc}",
            "context.trace_context and context.retry_context are not instances of its TraceContext and RetryContext",
        )
        return False
    abcs[0].register(TraceContext)
    abcs[1].register(RetryContext)
    return True


register_private_contexts()


class FunctionAppError(ValueError):
    """The FunctionApp cannot be indexed at all (a function without a trigger, two functions of one name)."""


class FunctionsQueueMessage(_FullQueueMessage):
    """The ``azure.functions.QueueMessage`` a function receives, backed by the host's message.

    ``pop_receipt`` is the current one (it changes when the host renews the
    lease). ``lease_lost`` and ``cancelled`` are the host's events (see
    :class:`worker.QueueMessage`), for functions that want to stop early.
    """

    def __init__(self, message: QueueMessage) -> None:
        # azure-functions' QueueMessage.__init__ has no annotations.
        super().__init__(  # type: ignore[no-untyped-call]
            id=message.id,
            body=message.get_body(),
            dequeue_count=message.dequeue_count,
            expiration_time=message.expiration_time,
            insertion_time=message.insertion_time,
            time_next_visible=message.time_next_visible,
            pop_receipt=message.pop_receipt,
        )
        self._message = message

    @property
    def pop_receipt(self) -> str | None:
        return self._message.pop_receipt

    @property
    def lease_lost(self) -> threading.Event:
        return self._message.lease_lost

    @property
    def cancelled(self) -> threading.Event:
        return self._message.cancelled


def disabled(name: str, environ: Mapping[str, str]) -> bool:
    """Functions' switch ``AzureWebJobs.<name>.Disabled`` (``true`` or ``1``); ``__`` may stand for the dots."""
    for key in (f"AzureWebJobs.{name}.Disabled", f"AzureWebJobs__{name}__Disabled"):
        if environ.get(key, "").strip().lower() in ("true", "1"):
            return True
    return False


def from_function_app(
    app: FunctionRegister,
    environ: Mapping[str, str] | None = None,
    connection_problem: Callable[[str, Service], str | None] | None = None,
) -> ConvertedApp:
    """Register each queue-triggered function of ``app`` into a new WorkerApp; list the functions left out.

    ``environ`` holds the app settings (``%SETTING%`` values and the
    ``Disabled`` switches; default ``os.environ``); ``connection_problem``,
    when given, says why a binding's connection cannot serve a service
    (the start-up checks' ``connection_problem``). Nothing is raised for a
    function that cannot run: its problems are collected, so that the caller
    can list every one of them at once. Raises :class:`FunctionAppError` only
    for an app Functions would not index either.
    """
    if not isinstance(app, FunctionRegister):
        raise TypeError(f"expected an azure.functions.FunctionApp, got {type(app).__name__}")
    return from_functions(_functions(app), environ, connection_problem)


def from_functions(
    functions: list[Function],
    environ: Mapping[str, str] | None = None,
    connection_problem: Callable[[str, Service], str | None] | None = None,
) -> ConvertedApp:
    """:func:`from_function_app` for functions described otherwise: a v1 app's function.json files make them too."""
    environ = os.environ if environ is None else environ
    worker_app = WorkerApp()
    skipped: list[SkippedFunction] = []
    switched_off: list[str] = []
    problems: list[str] = []
    ignored_retry: list[str] = []
    for function in functions:
        name = function.get_function_name() or function.get_user_function().__name__
        trigger = function.get_trigger()
        assert trigger is not None  # get_functions() refuses a function without one
        if trigger.type != QUEUE_TRIGGER:
            skipped.append(skipped_function(name, trigger.type or "unknown"))
            continue
        if disabled(name, environ):
            switched_off.append(name)
            continue
        found = _FunctionProblems(name)
        if connection_problem is not None:
            _check_connections(function, found, connection_problem)
        _register(worker_app, function, name, trigger, environ, found)
        problems.extend(found.lines)
        if function.get_setting("retry_policy") is not None:  # Functions does not apply it to a queue trigger
            ignored_retry.append(name)
    try:
        worker_app.functions  # noqa: B018 -- names are checked when read
    except ValueError as exc:
        raise FunctionAppError(str(exc)) from None
    return ConvertedApp(worker_app, tuple(skipped), tuple(switched_off), tuple(problems), tuple(ignored_retry))


def skipped_function(name: str, trigger_type: str) -> SkippedFunction:
    """A function with a trigger other than a queue's, and the sentence that says it is not run."""
    kind = trigger_type.removesuffix("Trigger")
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    message = f"function {name} has {article} {kind} trigger; this host runs queue triggers only; it is not run"
    return SkippedFunction(name, trigger_type, message)


class _FunctionProblems:
    """The problems found in one function, each line naming it (and the binding where there is one)."""

    def __init__(self, function: str) -> None:
        self.function = function
        self.lines: list[str] = []

    def add(self, problem: str, binding: Binding | None = None) -> None:
        where = f"function {self.function}"
        if binding is not None and binding.type == QUEUE_TRIGGER:
            where += f", trigger {binding.type} ({binding.name})"
        elif binding is not None:
            where += f", {_direction(binding)} binding {binding.type} ({binding.name})"
        self.lines.append(f"{where}: {problem}")


def _functions(app: FunctionRegister) -> list[Function]:
    """``app.get_functions()``, made repeatable and quiet.

    get_functions() records the names it returns in ``app.functions_bindings``
    and refuses names it has seen, so a second call on the same app fails
    with "does not have a unique function name"; it starts from an empty
    record here. It also logs, on the root logger, a warning about HTTP auth
    levels for every app without an HTTP function: noise for a queue host.
    """
    app.functions_bindings = None
    with _without_auth_level_notice():
        try:
            return app.get_functions()
        except ValueError as exc:  # a function without a trigger, two functions of one name
            raise FunctionAppError(str(exc)) from None


class _AuthLevelNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Auth level is not applied to non http function app")


@contextmanager
def _without_auth_level_notice() -> Iterator[None]:
    notice = _AuthLevelNotice()
    root = logging.getLogger()
    root.addFilter(notice)
    try:
        yield
    finally:
        root.removeFilter(notice)


def _direction(binding: Binding) -> str:
    # Binding.direction is the enum's int value, not the enum.
    return {BindingDirection.IN.value: "input", BindingDirection.OUT.value: "output"}.get(binding.direction, "inout")


def _setting(binding: Binding, attr: str) -> str | None:
    """A binding field: the typed decorators set ``queue_name``; ``generic_*(**kwargs)`` may say ``queueName``."""
    camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), attr)
    value = getattr(binding, attr, None) or getattr(binding, camel, None)
    return str(value) if value else None


#: What each binding this host provides is, by (type, direction).
_QUEUE_OUT = (QUEUE, BindingDirection.OUT.value)
_BLOB_IN = (BLOB, BindingDirection.IN.value)
_BLOB_OUT = (BLOB, BindingDirection.OUT.value)
_TRIGGER_TYPES = (func.QueueMessage, str, bytes)
_BLOB_INPUT_TYPES = (func.InputStream, str, bytes)


def _register(
    worker_app: WorkerApp,
    function: Function,
    name: str,
    trigger: Binding,
    environ: Mapping[str, str],
    problems: _FunctionProblems,
) -> None:
    """Register one queue-triggered function; every reason it cannot run goes to ``problems`` instead."""
    user = function.get_user_function()
    others = [b for b in function.get_bindings() if b is not trigger]
    usable = _usable(others, problems)
    parameters = inspect.signature(user).parameters
    bound = {trigger.name, *(b.name for b in others if b.name != RETURN)}
    _check_parameters(user, parameters, bound, problems)
    hints = _annotations(user)
    _check_annotations(hints, trigger, usable, problems)

    queue_name = _resolved(trigger, "queue_name", environ, problems)
    resolved = {id(b): _resolved(b, "queue_name" if b.type == QUEUE else "path", environ, problems) for b in usable}
    if problems.lines:
        return

    out_args = {
        b.name: (RETURN_ARG if b.name == RETURN else b.name) for b in usable if b.direction == BindingDirection.OUT.value
    }
    handler = _handler(
        user,
        name,
        trigger.name,
        hints,
        usable,
        out_args,
        requires_context="context" in parameters and "context" not in bound,
    )
    try:
        for binding in usable:
            connection = _setting(binding, "connection") or DEFAULT_CONNECTION
            if (binding.type, binding.direction) == _QUEUE_OUT:
                worker_app.queue_output(
                    arg_name=out_args[binding.name],
                    queue_name=resolved[id(binding)],
                    connection=connection,
                )(handler)
            elif binding.direction == BindingDirection.OUT.value:
                worker_app.blob_output(
                    arg_name=out_args[binding.name],
                    path=resolved[id(binding)],
                    connection=connection,
                )(handler)
            else:
                worker_app.blob_input(
                    arg_name=binding.name,
                    path=resolved[id(binding)],
                    connection=connection,
                    data_type=_data_type(binding),
                )(handler)
        worker_app.queue_trigger(
            arg_name=trigger.name,
            queue_name=queue_name,
            connection=_setting(trigger, "connection") or DEFAULT_CONNECTION,
        )(handler)
    except (ValueError, TypeError) as exc:
        problems.add(str(exc))
        return
    worker_app.function_name(name)(handler)


def _usable(bindings: list[Binding], problems: _FunctionProblems) -> list[Binding]:
    """The bindings this host provides (queue outputs, blob inputs and outputs); a problem for each other one."""
    for binding in bindings:
        if (binding.type, binding.direction) not in (_QUEUE_OUT, _BLOB_IN, _BLOB_OUT):
            problems.add(
                "this host does not provide this binding type (it provides queue outputs and blob inputs and outputs)",
                binding,
            )
    return [b for b in bindings if (b.type, b.direction) in (_QUEUE_OUT, _BLOB_IN, _BLOB_OUT)]


def _check_parameters(
    user: Callable[..., Any],
    parameters: Mapping[str, inspect.Parameter],
    bound: set[str],
    problems: _FunctionProblems,
) -> None:
    """A problem for a binding without a parameter, and for required parameters without a binding."""
    missing = sorted(bound - set(parameters))
    if missing:
        problems.add(f"{user.__name__}() has no parameter for binding(s) {', '.join(missing)}")
    unbound = sorted(
        p.name
        for p in parameters.values()
        if p.name not in bound
        and p.name != "context"
        and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )
    if unbound:
        problems.add(f"{user.__name__}() has no binding for parameter(s) {', '.join(unbound)}")


def _check_annotations(
    hints: Mapping[str, Any], trigger: Binding, usable: list[Binding], problems: _FunctionProblems
) -> None:
    """A problem for a trigger or blob input parameter annotated with a type the host cannot pass it."""
    trigger_hint = hints.get(trigger.name, inspect.Parameter.empty)
    if not _accepts(trigger_hint, _TRIGGER_TYPES):
        problems.add(
            f"parameter {trigger.name} is annotated {_type_name(trigger_hint)}; a queue trigger binds "
            "func.QueueMessage, str or bytes",
            trigger,
        )
    for binding in usable:
        hint = hints.get(binding.name, inspect.Parameter.empty)
        if (binding.type, binding.direction) == _BLOB_IN and not _accepts(hint, _BLOB_INPUT_TYPES):
            problems.add(
                f"parameter {binding.name} is annotated {_type_name(hint)}; a blob input binds "
                "func.InputStream, str or bytes",
                binding,
            )


def _data_type(binding: Binding) -> str | None:
    """A binding's ``data_type`` by name (``STRING``, ``BINARY``, ``STREAM``): Binding.data_type is the enum's int."""
    return DataType(binding.data_type).name if binding.data_type is not None else None


def _check_connections(
    function: Function, problems: _FunctionProblems, connection_problem: Callable[[str, Service], str | None]
) -> None:
    """Add a problem for every queue or blob binding whose connection cannot serve it."""
    services: dict[str, Service] = {BLOB: "blob", QUEUE: "queue", QUEUE_TRIGGER: "queue"}
    for binding in function.get_bindings():
        service = services.get(binding.type or "")
        connection = _setting(binding, "connection") or DEFAULT_CONNECTION
        if service is not None and (problem := connection_problem(connection, service)):
            problems.add(problem, binding)


def _resolved(binding: Binding, attr: str, environ: Mapping[str, str], problems: _FunctionProblems) -> str:
    """A binding's queue name or path with ``%SETTING%`` read from the app settings; a problem when it cannot be."""
    value = _setting(binding, attr)
    if value is None:
        problems.add(f"has no {attr}", binding)
        return ""
    if unset := expressions.unset_settings(attr.replace("_", " "), value, environ):
        problems.add(unset, binding)
        return ""
    return expressions.resolve_settings(value, environ)


def _annotations(user: Callable[..., Any]) -> dict[str, Any]:
    """Parameter annotations, evaluated where they can be (string annotations from ``from __future__``)."""
    try:
        signature = inspect.signature(user, eval_str=True)
    except Exception:
        signature = inspect.signature(user)
    return {name: p.annotation for name, p in signature.parameters.items()}


def _accepts(hint: Any, types: tuple[type, ...]) -> bool:
    """Whether a parameter annotated ``hint`` can take one of ``types`` (unannotated takes the binding's object)."""
    if hint is inspect.Parameter.empty or isinstance(hint, str):  # a name that could not be evaluated: trust it
        return True
    return isinstance(hint, type) and issubclass(hint, types)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__qualname__", None) or str(hint)


def _queue_value(value: Any) -> Any:
    """An output value as the Python worker's queue converter takes it: str, bytes, a QueueMessage, or a list of them.

    A QueueMessage (alone or in a list) becomes its body. Anything else is
    refused, as the converter's NotImplementedError refuses it, and the
    message goes to poison at once (no attempt could send it); a dict is
    refused rather than sent as its keys (which is what iterating it in the
    Python worker does).
    """
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, func.QueueMessage):
        return value.get_body()
    if isinstance(value, collections.abc.Iterable) and not isinstance(value, (dict, bytearray)):
        items = list(value)
        for item in items:
            if not isinstance(item, (str, func.QueueMessage)):
                raise UnusableOutput(f"a queue output list takes str or func.QueueMessage items, not {type(item).__name__}")
        return [item.get_body() if isinstance(item, func.QueueMessage) else item for item in items]
    raise UnusableOutput(
        f"a queue output takes str, bytes, func.QueueMessage or a list of str/func.QueueMessage, "
        f"not {type(value).__name__} (json.dumps a dict first)"
    )


def _handler(
    user: Callable[..., Any],
    name: str,
    trigger_arg: str,
    hints: Mapping[str, Any],
    bindings: list[Binding],
    out_args: Mapping[str, str],
    *,
    requires_context: bool,
) -> Callable[..., Any]:
    """A host handler calling ``user``: sync for a sync function, async for an async one."""
    queue_outs = {out_args[b.name] for b in bindings if (b.type, b.direction) == _QUEUE_OUT}
    blob_ins = [b.name for b in bindings if (b.type, b.direction) == _BLOB_IN]

    def arguments(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Out[Any] | None]:
        kwargs = dict(kwargs)
        returned = kwargs.pop(RETURN_ARG, None)
        trigger = kwargs[trigger_arg]
        call = {**kwargs, trigger_arg: FunctionsQueueMessage(trigger) if isinstance(trigger, QueueMessage) else trigger}
        for arg in blob_ins:
            if isinstance(stream := call[arg], blob_bindings.InputStream):
                call[arg] = _BlobStream(data=stream.read(), name=stream.name, uri=stream.uri, length=stream.length)
        return call, returned

    def finish(result: Any, returned: Out[Any] | None, kwargs: dict[str, Any]) -> None:
        if returned is not None:
            returned.set(result)
        elif result is not None:
            raise RuntimeError(f"function {name!r} without a $return binding returned a non-None value")
        for arg in queue_outs:
            out = kwargs[arg]
            if (value := out.get()) is not None:
                out.set(_queue_value(value))

    if inspect.iscoroutinefunction(user):

        async def handler(**kwargs: Any) -> None:
            call, returned = arguments(kwargs)
            finish(await user(**call), returned, kwargs)
    else:

        def handler(**kwargs: Any) -> None:  # type: ignore[misc]
            call, returned = arguments(kwargs)
            finish(user(**call), returned, kwargs)

    handler.__name__ = handler.__qualname__ = name
    handler.__module__ = user.__module__
    handler.__doc__ = user.__doc__
    # WorkerApp's decorators check that the handler takes the trigger and binding arguments, and read the
    # annotations of the trigger and the blob inputs to choose what the host passes (the message, str or bytes).
    empty = inspect.Parameter.empty
    carried = {arg: hints.get(arg, empty) for arg in (trigger_arg, *blob_ins)}
    handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=carried.get(arg, empty))
            for arg in (trigger_arg, *blob_ins, *out_args.values(), *(["context"] if requires_context else []))
        ]
    )
    return handler
