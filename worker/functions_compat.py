"""Run an ``azure.functions.FunctionApp`` (the Functions Python v2 model) on this host, unchanged.

Why: an app written for Azure Functions should move here, or run both places,
without a rewrite. ``worker run --app function_app:app`` therefore also takes
the FunctionApp of an existing ``function_app.py``: :func:`from_function_app`
reads the functions its decorators recorded and registers each
queue-triggered one into a :class:`~worker.app.WorkerApp`, with a handler that
calls the user's function as the Functions Python worker would:

- the name is ``@app.function_name``'s, else the Python function's;
- the trigger's ``queue_name`` and ``connection`` (``AzureWebJobsStorage``
  when empty); ``%SETTING%`` in a queue name is read from the environment, as
  Functions resolves it from app settings;
- the message arrives as an ``azure.functions.QueueMessage`` (every attribute
  filled: id, body, dequeue_count, pop_receipt and the three times), under the
  trigger's ``arg_name``;
- a sync function stays sync (it runs on the host's handler threads) and an
  async one runs on the event loop;
- ``@app.queue_output`` bindings get a :class:`worker.Out` (``set``/``get``,
  like ``func.Out``), sent only when the function succeeds; with
  ``arg_name="$return"`` the return value is sent; returning a value without a
  ``$return`` binding fails the invocation, as in Functions;
- a parameter named ``context`` gets an ``azure.functions.Context``.

Functions this host cannot run (an http, timer, blob ... trigger, or an input
or output binding other than a queue output) are not dropped silently: they
come back in :attr:`ConvertedApp.skipped`, for the caller to warn about.
This module imports azure-functions (the optional extra ``azure-functions``);
``worker.cli`` imports it only when the app is a FunctionApp.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.functions.decorators.core import Binding, BindingDirection
from azure.functions.decorators.function_app import Function, FunctionRegister
from azure.functions.queue import QueueMessage as _FullQueueMessage

from worker.app import WorkerApp
from worker.dispatcher import current_invocation
from worker.message import QueueMessage
from worker.outputs import Out

QUEUE_TRIGGER = "queueTrigger"
QUEUE_OUTPUT = "queue"
DEFAULT_CONNECTION = "AzureWebJobsStorage"
#: The arg_name of an output binding that takes the function's return value.
RETURN = "$return"
#: What the wrapper calls the ``$return`` output: the host passes outputs as keyword arguments, "$return" is no identifier.
_RETURN_ARG = "__azure_functions_return__"

# A worker.Out passes isinstance checks against func.Out, as the Functions worker's own Out does.
func.Out.register(Out)


class FunctionAppError(ValueError):
    """The FunctionApp cannot be run as written (a duplicate name, a parameter without a binding, ...)."""


@dataclass(frozen=True, slots=True)
class SkippedFunction:
    """A function of the FunctionApp that this host does not run, and why."""

    name: str
    #: The trigger's binding type as in function.json: ``httpTrigger``, ``timerTrigger``, ``queueTrigger`` ...
    trigger_type: str
    #: One sentence for the log, naming the function.
    message: str


@dataclass(frozen=True, slots=True)
class ConvertedApp:
    """What :func:`from_function_app` made: the queue-triggered functions as a WorkerApp, and the rest."""

    app: WorkerApp
    skipped: tuple[SkippedFunction, ...]


class FunctionsQueueMessage(_FullQueueMessage):
    """The ``azure.functions.QueueMessage`` a function receives, backed by the host's message.

    ``pop_receipt`` is the current one (it changes when the host renews the
    lease). ``lease_lost`` and ``cancelled`` are the host's events (see
    :class:`worker.QueueMessage`), for functions that want to stop early.
    """

    def __init__(self, message: QueueMessage) -> None:
        super().__init__(
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


class _Context(func.Context):
    """``func.Context`` for a function with a ``context`` parameter; no tracing or retry context here (None)."""

    def __init__(self, invocation_id: str, function_name: str, function_directory: str) -> None:
        self._invocation_id = invocation_id
        self._function_name = function_name
        self._function_directory = function_directory
        self._thread_local_storage = threading.local()
        self._thread_local_storage.invocation_id = invocation_id

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> Any:
        return self._thread_local_storage

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._function_directory

    @property
    def trace_context(self) -> Any:
        return None

    @property
    def retry_context(self) -> Any:
        return None


def from_function_app(app: FunctionRegister) -> ConvertedApp:
    """Register each queue-triggered function of ``app`` into a new WorkerApp; list the functions left out.

    The WorkerApp may hold no function (the caller decides whether that is an
    error). Raises :class:`FunctionAppError` for an app Functions would not
    index either, or one whose queue names do not resolve or are invalid.
    """
    if not isinstance(app, FunctionRegister):
        raise TypeError(f"expected an azure.functions.FunctionApp, got {type(app).__name__}")
    worker_app = WorkerApp()
    skipped: list[SkippedFunction] = []
    for function in _functions(app):
        name = function.get_function_name() or function.get_user_function().__name__
        trigger = function.get_trigger()
        assert trigger is not None  # get_functions() refuses a function without one
        if trigger.type != QUEUE_TRIGGER:
            kind = (trigger.type or "unknown").removesuffix("Trigger")
            message = f"function {name} has a {kind} trigger; this host runs queue triggers only; it is not run"
            skipped.append(SkippedFunction(name, trigger.type or "unknown", message))
            continue
        others = [b for b in function.get_bindings() if b is not trigger]
        unsupported = [b for b in others if not _is_queue_output(b)]
        if unsupported:
            listed = ", ".join(f"{_direction(b)} binding {b.type} ({b.name})" for b in unsupported)
            skipped.append(SkippedFunction(
                name, trigger.type,
                f"function {name} has a queue trigger but also {listed}, which this host does not provide "
                "(it provides queue output bindings only); it is not run",
            ))
            continue
        try:
            _register(worker_app, function, name, trigger, others)
        except (ValueError, TypeError) as exc:
            raise FunctionAppError(f"function {name}: {exc}") from None
    try:
        worker_app.functions  # noqa: B018 -- names are checked when read
    except ValueError as exc:
        raise FunctionAppError(str(exc)) from None
    return ConvertedApp(worker_app, tuple(skipped))


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


def _is_queue_output(binding: Binding) -> bool:
    return binding.type == QUEUE_OUTPUT and binding.direction == BindingDirection.OUT.value


def _direction(binding: Binding) -> str:
    # Binding.direction is the enum's int value, not the enum.
    return {BindingDirection.IN.value: "an input", BindingDirection.OUT.value: "an output"}.get(
        binding.direction, "an in/out"
    )


_SETTING = re.compile(r"%([^%]+)%")


def _setting(binding: Binding, attr: str) -> str | None:
    """A binding field: the typed decorators set ``queue_name``; ``generic_trigger(**kwargs)`` may say ``queueName``."""
    camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), attr)
    value = getattr(binding, attr, None) or getattr(binding, camel, None)
    return str(value) if value else None


def _queue_name(binding: Binding) -> str:
    """The binding's queue name, with ``%SETTING%`` read from the environment."""
    name = _setting(binding, "queue_name")
    if name is None:
        raise ValueError(f"binding {binding.name} has no queue_name")

    def resolve(match: re.Match[str]) -> str:
        value = os.environ.get(match.group(1))
        if value is None:
            raise ValueError(f"queue name {name!r} refers to the setting {match.group(1)}, which is not set")
        return value

    return _SETTING.sub(resolve, name)


def _register(
    worker_app: WorkerApp, function: Function, name: str, trigger: Binding, outputs: list[Binding]
) -> None:
    user = function.get_user_function()
    parameters = inspect.signature(user).parameters
    bound = {trigger.name, *(b.name for b in outputs if b.name != RETURN)}
    requires_context = "context" in parameters and "context" not in bound
    missing = sorted(bound - set(parameters))
    if missing:
        raise ValueError(f"{user.__name__}() has no parameter for binding(s) {', '.join(missing)}")
    unbound = sorted(
        p.name for p in parameters.values()
        if p.name not in bound and p.name != "context" and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )
    if unbound:
        raise ValueError(f"{user.__name__}() has no binding for parameter(s) {', '.join(unbound)}")

    out_args = {b.name: (_RETURN_ARG if b.name == RETURN else b.name) for b in outputs}
    try:
        directory = str(Path(inspect.getfile(user)).resolve().parent)
    except (TypeError, OSError):
        directory = os.getcwd()
    handler = _handler(
        user, name, trigger.name, out_args.values(), has_return=RETURN in out_args,
        requires_context=requires_context, directory=directory,
    )
    for binding in outputs:
        worker_app.queue_output(
            arg_name=out_args[binding.name], queue_name=_queue_name(binding),
            connection=_setting(binding, "connection") or DEFAULT_CONNECTION,
        )(handler)
    worker_app.queue_trigger(
        arg_name=trigger.name, queue_name=_queue_name(trigger),
        connection=_setting(trigger, "connection") or DEFAULT_CONNECTION,
    )(handler)
    worker_app.function_name(name)(handler)


def _plain(value: Any) -> Any:
    """An output value as the host sends it: a ``func.QueueMessage`` (alone or in a list) becomes its body."""
    if isinstance(value, func.QueueMessage):
        return value.get_body()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _handler(
    user: Callable[..., Any],
    name: str,
    trigger_arg: str,
    out_args: Any,
    *,
    has_return: bool,
    requires_context: bool,
    directory: str,
) -> Callable[..., Any]:
    """A host handler calling ``user``: sync for a sync function, async for an async one."""
    out_args = tuple(out_args)

    def arguments(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Out[Any] | None]:
        kwargs = dict(kwargs)
        returned = kwargs.pop(_RETURN_ARG, None)
        call = {**kwargs, trigger_arg: FunctionsQueueMessage(kwargs[trigger_arg])}
        if requires_context:
            invocation = current_invocation.get()
            invocation_id = invocation.id if invocation is not None else str(uuid.uuid4())
            call["context"] = _Context(invocation_id, name, directory)
        return call, returned

    def finish(result: Any, returned: Out[Any] | None, kwargs: dict[str, Any]) -> None:
        if returned is not None:
            returned.set(result)
        elif result is not None:
            raise RuntimeError(f"function {name!r} without a $return binding returned a non-None value")
        for arg in out_args:
            out = kwargs[arg]
            if (value := out.get()) is not None:
                out.set(_plain(value))

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
    # WorkerApp's decorators check that the handler takes the trigger and output arguments.
    handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY) for arg in (trigger_arg, *out_args)]
    )
    return handler
