"""Middleware: the host's policies as pluggable pieces with named hooks (Dramatiq's model).

The loop only announces what happens; middleware decides what to do about it.
The host's own come first (:mod:`.builtin`), then the app's, then host.yaml's; ``after_*`` hooks run in reverse.
A raise in ``before_invocation`` or ``after_invocation`` fails the invocation; elsewhere it is logged, then skipped.
docs/middleware.md is the one reference for the API.
The host's own: :mod:`.tracing`, :mod:`.counting`, :mod:`.logs`, :mod:`.bindings`, :mod:`.concurrency`,
:mod:`.retry`; Spark's: :mod:`.spark`, :mod:`.spark_settings`, :mod:`.connect_jobs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import structlog

from worker.invocation import Invocation
from worker.model import Fate, Finished, FunctionSpec, Result
from worker.settings.config import FunctionOptions
from worker.settings.sections import SectionSchema

log = structlog.get_logger("worker.middleware")

T = TypeVar("T")

#: Seconds between two log lines of one failing hook; the failures between are counted in the next line.
FAILURE_LOG_INTERVAL = 60.0


class InvocationFailed(Exception):
    """Raised by a middleware hook to fail the attempt with exactly this reason (the message is retried)."""


class Middleware:
    """Base class: every hook does nothing. Override the ones you need."""

    #: The function options this middleware reads (decorator keyword arguments: ``spark=True``), by name, each with
    #: a line saying what it does. A function given an option that no middleware (nor the host) declares is refused
    #: at start, by the option's name (Dramatiq's ``actor_options``).
    function_options: ClassVar[Mapping[str, str]] = {}
    #: The top-level settings sections this middleware reads (Spark's: ``spark:``), each with its keys and how they
    #: are checked. The host lists a declared section's problems with its other start problems, and refuses a
    #: section that nothing declares, by its name (:mod:`worker.settings.sections`).
    settings_sections: ClassVar[Sequence[SectionSchema]] = ()

    def host_started(self, functions: Sequence[FunctionSpec]) -> None:
        """The host has started its listeners for ``functions``."""

    def host_stopped(self) -> None:
        """The host has drained and is about to close storage."""

    def not_ready(self) -> list[str]:
        """Why the host is not ready by this middleware's account (Spark still starting, say): lines for ``/readyz``.

        Called on the event loop for each readiness probe, so it must answer at once from what it holds.
        """
        return []

    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        """How many messages the listener of ``function`` may receive now, at most ``room``.

        ``running`` is the function's invocations held now (received and not
        completed). Returning 0 holds its receives back: the listener asks
        again when one of the host's invocations completes, or when this
        middleware calls :meth:`wake_listeners`.
        """
        return room

    def after_receive(self, function: FunctionSpec, count: int) -> None:
        """The listener of ``function`` received ``count`` messages (more than 0)."""

    def before_invocation(self, invocation: Invocation) -> Any:
        """The handler is about to be called; ``invocation.kwargs`` holds what it will be called with."""

    def after_invocation(self, invocation: Invocation, result: Result) -> Any:
        """The handler returned or failed with ``result``; return a Result to replace it, or None to keep it."""

    def on_interrupt(self, invocation: Invocation) -> None:
        """The host gave up on the invocation (lease lost, functionTimeout, shutdown); called on the event loop."""

    def retry_delay(self, item: Finished, delay: float) -> float:
        """Seconds a failed message stays invisible before its next attempt (``delay``: what earlier layers chose)."""
        return delay

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        """The message was completed: ``done`` says what was done to it (deleted, released, poisoned, ...)."""

    def wake_listeners(self) -> None:
        """Have the listeners of every host this middleware serves ask ``receive_limit`` again now; from any thread.

        Not a hook but a call for the middleware to make: a listener held back
        by ``receive_limit`` otherwise asks again only when an invocation
        completes, which for a function held back from the start never happens.
        """
        for ref in getattr(self, _CHAINS, ()):
            if (chain := ref()) is not None:
                chain.wake_listeners()


#: The instance attribute where a middleware keeps the chains it is part of (for :meth:`Middleware.wake_listeners`):
#: weak references in a tuple replaced whole, so that a thread reading it never sees it change.
_CHAINS = "_worker_chains"

_HOOKS = (
    "host_started",
    "host_stopped",
    "not_ready",
    "receive_limit",
    "after_receive",
    "before_invocation",
    "after_invocation",
    "on_interrupt",
    "retry_delay",
    "after_completion",
)


class Chain:
    """The host's middleware in order, calling only the hooks each one overrides."""

    def __init__(self, middleware: Sequence[Middleware], failed: Callable[[str], None] | None = None) -> None:
        """``failed`` is told the name of a middleware whose hook raised (the host counts it in ``/metrics``)."""
        self.middleware = tuple(middleware)
        self._failed = failed
        #: Per failing hook: when it was last logged, and its failures since.
        self._failures: dict[str, tuple[float, int]] = {}
        hooks = {
            name: [getattr(m, name) for m in self.middleware if getattr(type(m), name) is not getattr(Middleware, name)]
            for name in _HOOKS
        }
        self._started = hooks["host_started"]
        self._stopped = hooks["host_stopped"][::-1]
        self._not_ready = hooks["not_ready"]
        self._limits = hooks["receive_limit"]
        self._received = hooks["after_receive"]
        # Whether each invocation hook is a coroutine function is decided once, not asked per message.
        self._before = [(hook, inspect.iscoroutinefunction(hook)) for hook in hooks["before_invocation"]]
        self._after = [(hook, inspect.iscoroutinefunction(hook)) for hook in hooks["after_invocation"][::-1]]
        self._interrupts = hooks["on_interrupt"]
        self._delays = hooks["retry_delay"]
        self._completed = hooks["after_completion"][::-1]
        #: What wakes each listener, with its event loop: replaced whole on the loop, read from any thread.
        self._watchers: tuple[tuple[asyncio.AbstractEventLoop, Callable[[], None]], ...] = ()
        for m in self.middleware:
            with contextlib.suppress(TypeError):  # a middleware without __dict__ (slots) cannot wake listeners
                chains = tuple(ref for ref in vars(m).get(_CHAINS, ()) if ref() is not None)
                vars(m)[_CHAINS] = (*chains, weakref.ref(self))

    def call(self, hook: Callable[..., T], fallback: T, *args: Any) -> T:
        """``hook(*args)``, or ``fallback`` when it raises: the failure is logged with the middleware's name and its
        traceback (then once a minute while it goes on failing, with a count) and counted as the middleware's."""
        try:
            return hook(*args)
        except Exception as exc:
            self._failure(hook, exc)
            return fallback

    def _failure(self, hook: Callable[..., object], exc: Exception) -> None:
        owner = getattr(hook, "__self__", None)
        middleware = type(owner).__name__ if owner is not None else getattr(hook, "__qualname__", repr(hook))
        name = getattr(hook, "__name__", repr(hook))
        if self._failed is not None:
            self._failed(middleware)
        key = f"{middleware}.{name}"
        now = time.monotonic()
        last, since = self._failures.get(key, (None, 0))
        if last is not None and now - last < FAILURE_LOG_INTERVAL:
            self._failures[key] = (last, since + 1)
            return
        self._failures[key] = (now, 0)
        log.error(
            "middleware hook failed; the host goes on as if it were not there",
            middleware=middleware,
            hook=name,
            error=f"{type(exc).__name__}: {exc}",
            failures_not_logged=since,
            exc_info=exc,
        )

    def host_started(self, functions: Sequence[FunctionSpec]) -> None:
        self._each(self._started, functions)

    def host_stopped(self) -> None:
        self._each(self._stopped)

    def not_ready(self) -> list[str]:
        """Every middleware's reasons the host is not ready; one that fails says so (a readiness probe must answer)."""
        problems: list[str] = []
        for hook in self._not_ready:
            problems += self.call(hook, [f"{getattr(hook, '__qualname__', repr(hook))} failed"])
        return problems

    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        for hook in self._limits:
            room = max(0, min(room, self.call(hook, room, function, options, running, room)))
        return room

    def watch_limits(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Have ``wake`` called on this event loop each time a middleware calls ``wake_listeners``; returns what
        undoes it. For a listener held back by ``receive_limit``: it then asks again."""
        watcher = (asyncio.get_running_loop(), wake)
        self._watchers = (*self._watchers, watcher)

        def unwatch() -> None:
            self._watchers = tuple(w for w in self._watchers if w is not watcher)

        return unwatch

    def wake_listeners(self) -> None:
        """Wake every listener watching this chain, each on its own event loop; safe from any thread."""
        for loop, wake in self._watchers:
            with contextlib.suppress(RuntimeError):  # its loop has closed: the listener is gone
                loop.call_soon_threadsafe(wake)

    def after_receive(self, function: FunctionSpec, count: int) -> None:
        self._each(self._received, function, count)

    async def before_invocation(self, invocation: Invocation) -> None:
        for hook, is_async in self._before:
            if is_async:
                await hook(invocation)
            else:
                hook(invocation)

    async def after_invocation(self, invocation: Invocation, result: Result) -> Result:
        for hook, is_async in self._after:
            changed = await hook(invocation, result) if is_async else hook(invocation, result)
            if changed is not None:
                result = changed
        return result

    def on_interrupt(self, invocation: Invocation) -> None:
        self._each(self._interrupts, invocation)

    def retry_delay(self, item: Finished, delay: float) -> float:
        for hook in self._delays:
            delay = self.call(hook, delay, item, delay)
        return delay

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        self._each(self._completed, item, result, done)

    def _each(self, hooks: Sequence[Callable[..., object]], *args: Any) -> None:
        """Call hooks that return nothing, each guarded as :meth:`call` guards one."""
        for hook in hooks:
            try:
                hook(*args)
            except Exception as exc:
                self._failure(hook, exc)


__all__ = ["Chain", "InvocationFailed", "Middleware"]
