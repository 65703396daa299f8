"""Middleware: the host's policies as pluggable pieces with named hooks (Dramatiq's model).

The loop only announces what happens; middleware decides what to do about it.
The host's own come first (:mod:`.builtin`), then the app's, then host.yaml's.
The :class:`Chain` finds hooks by name; :data:`COMBINE` says how answers combine and which hooks run in reverse.
A new hook is one method on :class:`Middleware` and its row in docs/middleware.md.
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

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

#: Middleware's public methods that are not hooks: calls for a middleware to make.
CALLS = frozenset({"wake_listeners"})

#: The hooks, by name: every public method of :class:`Middleware` but :data:`CALLS`.
HOOKS = tuple(
    name
    for name, value in vars(Middleware).items()
    if inspect.isfunction(value) and not name.startswith("_") and name not in CALLS
)


@dataclass(frozen=True)
class Combine:
    """How the chain answers a hook from the answers of its middleware.

    The default: each middleware in order, for what it does; what it returns is not used, and one that raises is
    gone around (:meth:`Chain.call`).
    """

    #: Last middleware first, so that the first has the last word (layers of an onion): the after-hooks.
    reverse: bool = False
    #: The hook's last argument is the answer so far: each middleware is given it, and ``threads(so_far, answer)``
    #: is the next. One that raises leaves the answer as it was.
    threads: Callable[[Any, Any], Any] | None = None
    #: Each middleware's answer is a list, the chain's all of them in order; one that raises adds a line saying so
    #: (for ``/readyz``, which must answer).
    gathers: bool = False
    #: An invocation hook, on the message's path: a middleware's may be ``async def`` (the chain's is a coroutine
    #: either way), and one that raises fails the attempt rather than being gone around.
    invocation: bool = False


#: The hooks whose answers combine, or which run last middleware first; every other hook gets ``Combine()``.
COMBINE: Mapping[str, Combine] = {
    "host_stopped": Combine(reverse=True),
    "not_ready": Combine(gathers=True),
    # The lowest limit wins, and none is below 0.
    "receive_limit": Combine(threads=lambda room, limit: max(0, min(room, limit))),
    "before_invocation": Combine(invocation=True),
    # None keeps the result, a Result replaces it.
    "after_invocation": Combine(
        reverse=True, invocation=True, threads=lambda result, changed: result if changed is None else changed
    ),
    # Each layer's delay replaces the one before.
    "retry_delay": Combine(threads=lambda delay, chosen: chosen),
    "after_completion": Combine(reverse=True),
}


def _default(cls: type, name: str) -> object | None:
    """The definition of hook ``name`` that does nothing: the one nearest the root of ``cls``'s ancestry (for a
    hook of Middleware, Middleware's own); None when ``cls`` has no such hook."""
    for base in reversed(cls.__mro__):
        if name in vars(base):
            found: object = vars(base)[name]
            return found
    return None


def _overrides(cls: type, name: str) -> bool:
    default = _default(cls, name)
    return default is not None and getattr(cls, name) is not default


class Chain(Middleware):
    """The host's middleware in order, answering each hook as one middleware would.

    Each hook is found by its name: the chain calls it on the middleware whose class overrides it, the others
    skipped once at the start rather than asked per message, in the order and combined as :data:`COMBINE` says.
    So a new hook is one method on :class:`Middleware` and its row in ``docs/middleware.md``, plus a row in
    :data:`COMBINE` if its answers combine. Middleware's hooks are the chain's attributes, with Middleware's
    signatures (the invocation hooks are coroutines); a hook only a subclass declares is had with :meth:`hook`.
    """

    if TYPE_CHECKING:  # set in __init__ as every hook is; only their types differ from Middleware's

        async def before_invocation(self, invocation: Invocation) -> None: ...

        async def after_invocation(self, invocation: Invocation, result: Result) -> Result: ...

    def __init__(self, middleware: Sequence[Middleware], failed: Callable[[str], None] | None = None) -> None:
        """``failed`` is told the name of a middleware whose hook raised (the host counts it in ``/metrics``)."""
        self.middleware = tuple(middleware)
        self._failed = failed
        #: Per failing hook: when it was last logged, and its failures since.
        self._failures: dict[str, tuple[float, int]] = {}
        #: What wakes each listener, with its event loop: replaced whole on the loop, read from any thread.
        self._watchers: tuple[tuple[asyncio.AbstractEventLoop, Callable[[], None]], ...] = ()
        self._hooks: dict[str, Callable[..., Any]] = {}
        for name in HOOKS:
            setattr(self, name, self.hook(name))
        for m in self.middleware:
            with contextlib.suppress(TypeError):  # a middleware without __dict__ (slots) cannot wake listeners
                chains = tuple(ref for ref in vars(m).get(_CHAINS, ()) if ref() is not None)
                vars(m)[_CHAINS] = (*chains, weakref.ref(self))

    def hook(self, name: str) -> Callable[..., Any]:
        """The chain's call of hook ``name``: one of :data:`HOOKS`, or one that a subclass of Middleware declares
        (a hook being tried before it is Middleware's); made on first use."""
        if name not in self._hooks:
            declared = any(callable(_default(type(m), name)) for m in self.middleware)
            if name not in HOOKS and (name.startswith("_") or name in CALLS or not declared):
                raise AttributeError(f"{name!r} is a hook of no middleware of this chain")
            self._hooks[name] = self._dispatch(name, COMBINE.get(name, Combine()))
        return self._hooks[name]

    def _dispatch(self, name: str, combine: Combine) -> Callable[..., Any]:
        hooks = [getattr(m, name) for m in self.middleware if _overrides(type(m), name)]
        if combine.reverse:
            hooks.reverse()
        if combine.invocation:
            return _awaited(hooks, combine.threads)
        if combine.threads is not None:
            return self._threaded(hooks, combine.threads)
        if combine.gathers:
            return self._gathered(hooks)
        return self._each(hooks)

    def _each(self, hooks: Sequence[Callable[..., object]]) -> Callable[..., None]:
        def each(*args: Any) -> None:
            for hook in hooks:
                self.call(hook, None, *args)

        return each

    def _threaded(self, hooks: Sequence[Callable[..., object]], threads: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        def threaded(*args: Any) -> Any:
            call = list(args)  # its last item is the answer so far
            for hook in hooks:
                try:
                    call[-1] = threads(call[-1], hook(*call))
                except Exception as exc:
                    self._failure(hook, exc)
            return call[-1]

        return threaded

    def _gathered(self, hooks: Sequence[Callable[..., list[str]]]) -> Callable[..., list[str]]:
        def gathered(*args: Any) -> list[str]:
            answers: list[str] = []
            for hook in hooks:
                answers += self.call(hook, [f"{getattr(hook, '__qualname__', repr(hook))} failed"], *args)
            return answers

        return gathered

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


def _awaited(hooks: Sequence[Callable[..., Any]], threads: Callable[[Any, Any], Any] | None) -> Callable[..., Any]:
    """An invocation hook of the chain: awaits the middleware's that are coroutine functions (decided once, not asked
    per message), and lets what one raises fail the attempt."""
    calls = [(hook, inspect.iscoroutinefunction(hook)) for hook in hooks]

    async def awaited(*args: Any) -> Any:
        if threads is None:
            for hook, is_async in calls:
                answer = hook(*args)
                if is_async:
                    await answer
            return None
        call = list(args)  # its last item is the answer so far
        for hook, is_async in calls:
            answer = await hook(*call) if is_async else hook(*call)
            call[-1] = threads(call[-1], answer)
        return call[-1]

    return awaited


__all__ = ["Chain", "InvocationFailed", "Middleware"]
