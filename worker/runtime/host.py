"""The host's lifecycle: start the listeners and the lease scheduler, run, drain, stop.

The host owns the order of shutdown, where messages are kept or lost:
1. the first SIGTERM or SIGINT stops every listener;
2. messages not yet started are released at once (visibility 0);
3. running handlers get ``drainTimeout`` to finish;
4. what still runs is cancelled and released, and the process exits 0.
A second signal from the same sender exits at once (:mod:`worker.runtime.signals`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from worker.app import WorkerApp
from worker.backends.blobs import BlobStore
from worker.backends.queues import QueueBackend, QueueNotFound, StorageGone, TransientError
from worker.backends.registry import (
    AZURE,
    DEFAULT_SQLITE_PATH,
    EMBEDDED,
    SQLITE_PREFIX,
    backend_kind,
    describe,
    open_backend,
    open_blob_store,
)
from worker.bindings.outputs import OutputBinding
from worker.middleware import Chain, Middleware, builtin
from worker.model import FunctionSpec, StartupRefused
from worker.observability import logs, tracing
from worker.observability.metrics import Metrics
from worker.runtime import inflight
from worker.runtime.backpressure import StoreTrouble
from worker.runtime.completion import CompletionProcessor
from worker.runtime.console.recorder import ConsoleRecorder
from worker.runtime.console.state import Console, HostParts, StartFacts, Watched
from worker.runtime.dispatcher import FUNCTION_OPTIONS as dispatcher_options
from worker.runtime.dispatcher import SHUTDOWN, Dispatcher
from worker.runtime.faults import Faults
from worker.runtime.handover import take
from worker.runtime.lease import LeaseScheduler
from worker.runtime.listener import FUNCTION_OPTIONS as listener_options
from worker.runtime.listener import Capacity, Listener
from worker.runtime.poison import is_poison_queue, looked_up_policy
from worker.runtime.recycle import Recycler, settle_handed_over
from worker.runtime.signals import FORWARDED, STOP_SIGNALS, Stop, StopSignals, read_after_stop
from worker.runtime.threads import TIMEOUT_GRACE, HandlerThreads
from worker.settings.config import FunctionOptions, HostConfig
from worker.settings.http_token import BearerToken, http_token
from worker.waits import wait_set

if TYPE_CHECKING:
    from worker.observability.otel import Telemetry
    from worker.runtime.endpoints import Endpoints

log = structlog.get_logger("worker.runtime.host")

#: How often burst mode looks whether the trigger queues are empty, in seconds.
BURST_CHECK_INTERVAL = 0.25
#: The kinds of backend whose queues burst mode's end looks through for messages no function reads: those where
#: listing the queues is one call (SQS and OCI Queue are left alone), at most so many queues each, within so long.
UNREAD_QUEUES_KINDS = frozenset({EMBEDDED.name, AZURE.name})
UNREAD_QUEUES_COUNTED = 32
UNREAD_QUEUES_TIMEOUT = 5.0
#: Queues the Functions host keeps for itself in a storage account it shares (blob trigger receipts and the like).
FUNCTIONS_OWN_QUEUES = "azure-webjobs-"
#: How often the queue-length gauge is refreshed when the endpoints are on, in seconds.
QUEUE_LENGTH_INTERVAL = 10.0
#: Longest the host waits, at shutdown, for the completions of cancelled invocations, in seconds. After it, cancelled
#: sync handlers get what a sync handler past functionTimeout gets (threads.TIMEOUT_GRACE). With the default
#: drainTimeout (20 s) a stop with a stuck sync handler thus ends well within Kubernetes' default grace of 30 s.
COMPLETION_GRACE = 5.0
#: The signals that drain the host: its own stop signals, and those the supervisor forwards.
HANDLED_SIGNALS = (*STOP_SIGNALS, *FORWARDED.values())


@dataclass
class _Storage:
    """One queue backend and one blob store per distinct connection string, shared by the bindings that name it.

    Implements :class:`worker.backends.storage.Storage` for the dispatcher's output and input bindings.
    """

    config: HostConfig
    metrics: Metrics
    by_connection: dict[str | None, QueueBackend] = field(default_factory=dict)
    blob_stores: dict[str, BlobStore] = field(default_factory=dict)
    #: The listeners of this host by (backend, queue), for :meth:`sent`.
    listening: dict[tuple[QueueBackend, str], list[Listener]] = field(default_factory=dict)
    #: When traces are on: every backend's calls become spans (:class:`worker.observability.otel.TracedQueues`).
    telemetry: Telemetry | None = None

    def queues(self, name: str | None) -> QueueBackend:
        """The queue backend of the connection setting ``name`` (opened on first use)."""
        connection = self.config.connection_string(name)
        if connection not in self.by_connection:
            backend = open_backend(connection, self.config.base_dir, on_retry=self.metrics.retried_storage_call)
            self.by_connection[connection] = self.telemetry.traced(backend) if self.telemetry else backend
            log.info("queue storage opened", connection=name, storage=describe(connection, self.config.base_dir))
        return self.by_connection[connection]

    def blobs(self, name: str | None) -> BlobStore:
        """The blob store of the connection setting ``name`` (opened on first use)."""
        connection = self.config.connection_string(name) or f"{SQLITE_PREFIX}{DEFAULT_SQLITE_PATH.as_posix()}"
        if connection not in self.blob_stores:
            self.blob_stores[connection] = store = open_blob_store(connection, self.config.base_dir)
            log.info("blob storage opened", connection=name, storage=store.describe())
        return self.blob_stores[connection]

    def listen(self, listener: Listener) -> None:
        self.listening.setdefault((listener.backend, listener.function.queue_name), []).append(listener)

    def sent(self, backend: QueueBackend, queue: str) -> None:
        """Wake this host's listeners of ``queue`` on ``backend``: a message was just put there."""
        for listener in self.listening.get((backend, queue), ()):
            listener.wake()

    async def close(self) -> None:
        for backend in self.by_connection.values():
            await backend.close()
        for store in self.blob_stores.values():
            await store.close()


@dataclass
class _Parts:
    """What one run of the host is made of (:meth:`Host._compose`), and what it starts that its end must stop."""

    #: What the endpoints ask of a caller; None where none is set (what names messages answers on loopback only).
    token: BearerToken | None
    telemetry: Telemetry | None
    backends: _Storage
    middleware: Chain
    scheduler: LeaseScheduler
    trouble: StoreTrouble
    completion: CompletionProcessor
    recycler: Recycler
    dispatcher: Dispatcher
    capacity: Capacity
    #: The host's own tasks (the lease scheduler, the in-flight record, the endpoints' watcher), stopped in order.
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    endpoints: Endpoints | None = None


class Host:
    """Runs the functions of one app until stopped (or, in burst mode, until their queues are empty)."""

    def __init__(
        self,
        app: WorkerApp,
        config: HostConfig,
        *,
        burst: bool = False,
        middleware: Sequence[Middleware] = (),
        handover: Path | None = None,
        in_flight: Path | None = None,
        facts: StartFacts | None = None,
        own_process: bool = False,
    ) -> None:
        """``middleware`` runs after the app's and host.yaml's; one of a kind the host would make itself (Spark's)
        replaces the host's own, e.g. to keep one Spark session across host runs. ``handover`` is the file this
        process and the one before it (if it was recycled) hand timed-out messages over in
        (:mod:`worker.runtime.recycle`); the supervisor names it, and ``in_flight``, where the host says what it
        holds should it die (:mod:`worker.runtime.inflight`). ``facts``: what ``worker run`` knows of the start that
        the host does not, for the console. ``own_process``: the process is the host's (``worker run``), so once
        the host stops, stop signals still arriving are read as before rather than left to the defaults, which
        would end it (:func:`worker.runtime.signals.read_after_stop`); a host built in code leaves them to its
        caller."""
        if app.problems:  # worker run lists them at start; a host built in code refuses them too
            raise StartupRefused(app.problems)
        if problem := tracing.problem(os.environ):  # worker run refuses it among the start-up checks
            raise StartupRefused([problem])
        if not app.functions:
            raise ValueError("the app registers no functions; decorate a handler with @app.queue_trigger")
        # The start-up checks (worker.ops.preflight) ran before the host was built; what is left to refuse here is
        # what the host cannot build at all.
        self._extra_middleware, problems = builtin.load(config.middleware)
        given = [*app.middleware, *self._extra_middleware, *middleware]
        problems += unknown_options(app, given) + builtin.section_problems(config, given)
        if problems:
            raise StartupRefused(problems)
        self.app = app
        self._given = tuple(middleware)
        self.config = config
        self.burst = burst
        self.metrics = Metrics()
        self.stopping = asyncio.Event()
        self.started_at = time.monotonic()
        self.handover = handover
        self.in_flight = in_flight
        self.facts = facts or StartFacts()
        self.own_process = own_process
        #: Why this process must be recycled (a sync handler ran past functionTimeout), once run() returns.
        self.recycled: str | None = None
        #: Why burst mode stopped before its queues were empty: storage unreachable for burstStorageTimeout.
        self.gave_up: str | None = None
        #: The host's own tasks; one that failed stopped the host (:attr:`Faults.failed` says which).
        self.faults = Faults(self.stopping)
        self._signals = StopSignals()

    def request_stop(self, signum: int | None = None) -> None:
        """Drain and stop; on a second signal from the same sender, exit at once."""
        if signum is not None:
            stop, original, forwarded = self._signals.receive(signum)
            sender = "the supervisor" if forwarded else "direct"
            if stop is Stop.EXIT_NOW:
                log.warning(
                    "second signal; exiting at once, leases will bring unfinished messages back",
                    signal=original.name,
                    sender=sender,
                )
                os._exit(128 + original)
            if stop is Stop.DRAIN:
                log.info("signal received; draining", signal=original.name, sender=sender)
        self.stopping.set()

    async def run(self) -> Dispatcher:
        """Run until stopped; return the dispatcher so the caller can see whether handler threads still run.

        Also returns, after draining, when a sync handler ran past functionTimeout (:attr:`recycled` says why):
        the caller must then end the process (``worker run`` exits with code 3) so that the handler ends too; when
        a task of the host's own failed (:attr:`faults`); and in burst mode when storage stayed unreachable
        (:attr:`gave_up`). ``worker run`` exits 1 after either.
        """
        parts = self._compose()
        self._catch_signals()
        self._start_own_tasks(parts)
        try:
            listeners = await self._listeners(parts)
            await self._settle_handover(parts)
            if self.config.http_port:
                await self._serve_endpoints(parts, listeners)
            self._announce(parts, listeners)
            await self._serve(parts, listeners)
            await self._wind_down(parts)
        finally:
            await self._close(parts)
        log.info("host stopped", seconds=round(self.elapsed, 3), **self.totals())
        return parts.dispatcher

    def _compose(self) -> _Parts:
        """The parts of a run, wired: storage, the middleware chain, the lease scheduler, completion, the dispatcher.

        A bad HTTP token refuses the start here (``worker run`` exits 2), before anything runs.
        """
        config = self.config
        _say_ignored(config, self.app.ignored_retry)
        token = http_token(config, os.environ) if config.http_port else None
        scheduler = LeaseScheduler(config.lease_duration, config.lease_renewal_fraction, self.metrics)
        telemetry = tracing.start(os.environ, tracing.SERVICE_NAME)
        backends = _Storage(config, self.metrics, telemetry=telemetry)
        middleware = self._chain(backends, telemetry)
        trouble = StoreTrouble()
        completion = CompletionProcessor(scheduler, self.metrics, middleware, trouble, sent=backends.sent)
        threads = HandlerThreads(config.handler_threads)
        recycler = Recycler(scheduler, self.stopping)
        scheduler.on_fault = self.faults.watch
        dispatcher = Dispatcher(scheduler, completion, middleware, threads, recycler, on_fault=self.faults.report)
        capacity = Capacity(config.max_in_flight)
        return _Parts(token, telemetry, backends, middleware, scheduler, trouble, completion, recycler, dispatcher, capacity)

    def _chain(self, backends: _Storage, telemetry: Telemetry | None) -> Chain:
        """The host's middleware, then the app's, host.yaml's and the caller's."""
        given = [*self.app.middleware, *self._extra_middleware, *self._given]
        # The console's recorder goes first: its after-hooks run last, so it sees each final result.
        recorder = [ConsoleRecorder()] if self.config.http_port else []
        standard = builtin.standard(self.config, self.metrics, backends, self.app.functions, given, telemetry)
        return Chain([*recorder, *standard, *given], failed=self.metrics.middleware_failed)

    def _catch_signals(self) -> None:
        """Stop signals, and those the supervisor forwards, drain the host (:meth:`request_stop`)."""
        loop = asyncio.get_running_loop()
        for signum in HANDLED_SIGNALS:
            loop.add_signal_handler(signum, self.request_stop, signum)

    def _start_own_tasks(self, parts: _Parts) -> None:
        """The lease scheduler, and where the host says what it holds should it die; both watched (:attr:`faults`)."""
        parts.tasks.append(self.faults.start(parts.scheduler.run(), "lease-scheduler"))
        if self.in_flight is not None:
            dispatcher = parts.dispatcher
            parts.tasks.append(
                self.faults.start(inflight.record(self.in_flight, lambda: dispatcher.invocations), "in-flight")
            )

    async def _listeners(self, parts: _Parts) -> list[Listener]:
        """One listener per function, once every trigger queue has been checked; refuses the start with every problem
        found, listed at once."""
        listeners: list[Listener] = []
        refused: list[str] = []
        for function in self.app.functions:
            backend = parts.backends.queues(function.connection)
            own = _options(self.config, function, backend)
            problems, unreachable = await self._trigger_problems(function, backend, own)
            refused += [f"function {function.name}, trigger queueTrigger ({function.arg_name}): {line}" for line in problems]
            if not refused:  # after a refusal, the start is over: nothing more is loaded
                listeners.append(self._listener(parts, function, backend, own, unreachable))
        if refused:
            raise StartupRefused(refused)
        return listeners

    async def _trigger_problems(
        self, function: FunctionSpec, backend: QueueBackend, own: FunctionOptions
    ) -> tuple[list[str], str | None]:
        """Why ``function``'s trigger queue cannot be served as configured, and why it cannot be looked at now.

        Storage that cannot be reached now is no reason to stop: the listener retries and waits for it, and /readyz
        says why from the start. What worker run's preflight refuses by the connection's kind is refused here by the
        backend itself, for a host built in code: a batch the service never returns would fail every receive.
        """
        over = backend.limits.exceeded(own, _service(self.config, function), partial(self.config.key_of, function.name))
        if over:
            return over, None
        try:
            problem = await _queue_problem(backend, function.queue_name, own)
        except TransientError as exc:
            self.metrics.inc("storage_errors", function.name)
            log.error(
                "cannot look at the trigger queue now; the listener will keep trying",
                function=function.name,
                queue=function.queue_name,
                error=str(exc),
            )
            return [], str(exc)
        return ([problem] if problem else []), None

    def _listener(
        self, parts: _Parts, function: FunctionSpec, backend: QueueBackend, own: FunctionOptions, unreachable: str | None
    ) -> Listener:
        """The listener of ``function``, known to storage (for :meth:`_Storage.sent`) and said loaded."""
        listener = Listener(
            function,
            backend,
            own,
            parts.dispatcher,
            parts.capacity,
            self.metrics,
            self.stopping,
            parts.middleware,
            parts.trouble,
        )
        listener.last_error = unreachable
        parts.backends.listen(listener)
        log.info(
            "function loaded",
            function=function.name,
            queue=function.queue_name,
            handler="async" if function.is_async else "sync",
            **_own_settings(self.config, own),
        )
        return listener

    async def _settle_handover(self, parts: _Parts) -> None:
        """Settle the messages the process before this one handed over (:mod:`worker.runtime.recycle`)."""
        if self.handover is None or not (handed := take(self.handover)):
            return
        config, backends = self.config, parts.backends
        await settle_handed_over(
            handed,
            self.app.functions,
            lambda function: (
                backends.queues(function.connection),
                _options(config, function, backends.queues(function.connection), quiet=True),
            ),
            parts.completion,
            self.metrics,
        )

    def _announce(self, parts: _Parts, listeners: list[Listener]) -> None:
        """Tell the middleware, and write the one line that says the host is ready whatever the log levels (host.json
        may keep the host's lines at Warning)."""
        parts.middleware.host_started(self.app.functions)
        logs.always(
            "worker.runtime.host",
            "host started",
            functions=len(listeners),
            pid=os.getpid(),
            burst=self.burst,
            middleware=[type(m).__name__ for m in parts.middleware.middleware],
        )

    async def _serve(self, parts: _Parts, listeners: list[Listener]) -> None:
        """Run the listeners until a stop (in burst mode, until the trigger queues are empty), then stop them all:
        nothing new is received."""
        tasks = [self.faults.start(lst.run(), f"listener-{lst.function.name}") for lst in listeners]
        if self.burst:
            await self._until_drained(listeners, parts.dispatcher, parts.backends)
        else:
            await self.stopping.wait()
        self.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)  # a failed one is reported already

    async def _wind_down(self, parts: _Parts) -> None:
        """Drain; hand over what a sync handler past functionTimeout holds, for the next process; tell the
        middleware the host has stopped."""
        await self._drain(parts.dispatcher)
        if parts.recycler.reason is not None:
            self.recycled = parts.recycler.reason
            await parts.recycler.hand_over(self.handover)
        parts.middleware.host_stopped()

    async def _close(self, parts: _Parts) -> None:
        """Whatever the run came to: end the host's own tasks and the endpoints, give the signals back, close storage
        and the handler threads, and export what the traces still hold."""
        for task in parts.tasks:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if parts.endpoints is not None:
            await parts.endpoints.stop()
        loop = asyncio.get_running_loop()
        for signum in HANDLED_SIGNALS:
            loop.remove_signal_handler(signum)
        if self.own_process:  # a late copy of the signal obeyed must not end the process as it closes
            read_after_stop(self._signals, HANDLED_SIGNALS)
        await parts.backends.close()
        parts.dispatcher.threads.close()
        if parts.telemetry is not None:  # every span has ended: export what the batch processor still holds
            parts.telemetry.shutdown()

    async def _serve_endpoints(self, parts: _Parts, listeners: list[Listener]) -> None:
        """Start the HTTP endpoints and the console, with gauges for in-flight messages, queue lengths, threads and
        tasks, and the task that keeps the gauge's queue lengths and the console's history."""
        # Imported here: the web framework is most of a worker's start, and a host without a port does not need it.
        from worker.runtime.connections import ConnectionLimits
        from worker.runtime.endpoints import Endpoints
        from worker.runtime.guard import Access, allowed_hosts

        dispatcher = parts.dispatcher
        lengths: dict[str, float] = {}

        async def storage_check() -> None:
            for lst in listeners:
                lengths[lst.function.queue_name] = await lst.backend.approximate_count(lst.function.queue_name)

        async def watch_lengths() -> None:
            while True:
                try:
                    await storage_check()
                except Exception as exc:  # readiness reports it; the gauge keeps its last values
                    log.debug("queue length check failed", error=type(exc).__name__)
                await asyncio.sleep(QUEUE_LENGTH_INTERVAL)

        def in_flight() -> dict[str, float]:
            """Messages held per function: the dispatcher's invocations, not the room a receive has reserved."""
            held: Counter[str] = Counter()
            for inv in list(dispatcher.invocations):  # read from the scrape's thread; list() copies under the GIL
                held[inv.function.name] += len(inv.deliveries)
            return {lst.function.name: held[lst.function.name] for lst in listeners}

        self.metrics.gauge("worker_messages_in_flight", "Messages received and not yet completed", "function", in_flight)
        self.metrics.gauge(
            "worker_queue_length", "Approximate message count of each trigger queue", "queue", lambda: dict(lengths)
        )
        loop = asyncio.get_running_loop()
        self.metrics.gauge(
            "worker_handler_threads",
            "Handler threads running a sync handler, and those of them running one the host gave up on",
            "state",
            lambda: {"busy": dispatcher.threads.busy, "abandoned": dispatcher.threads.abandoned},
        )
        # Read from the scrape's thread: all_tasks() copes with the set changing meanwhile.
        self.metrics.gauge(
            "worker_event_loop_tasks",
            "asyncio tasks alive on the host's event loop",
            "loop",
            lambda: {"host": len(asyncio.all_tasks(loop))},
        )
        middleware = parts.middleware
        endpoints = Endpoints(
            self.metrics,
            parts.scheduler,
            storage_check,
            [lst.function.name for lst in listeners],
            draining=self.stopping.is_set,
            stuck=dispatcher.threads.stuck,
            last_storage_error=lambda: next((lst.last_error for lst in listeners if lst.last_error), None),
            held_back=parts.trouble.problems,
            not_ready=lambda: [*self.faults.not_ready(), *middleware.not_ready()],
        )
        console = self._console(listeners, parts, endpoints)
        access = Access(
            parts.token, self.config.http_host, self.config.http_open_data, allowed_hosts(self.config.http_allowed_hosts)
        )
        await endpoints.start(self.config.http_port, access, console, ConnectionLimits.of(self.config))
        parts.endpoints = endpoints

        async def watch() -> None:
            await asyncio.gather(watch_lengths(), console.sample_forever())

        parts.tasks.append(self.faults.start(watch(), "queue-lengths"))

    def _console(self, listeners: list[Listener], parts: _Parts, endpoints: Endpoints) -> Console:
        config = self.config
        dispatcher = parts.dispatcher

        def running() -> dict[str, tuple[int, int]]:
            """Invocations and messages held per function."""
            found: dict[str, tuple[int, int]] = {}
            for inv in list(dispatcher.invocations):
                invocations, messages = found.get(inv.function.name, (0, 0))
                found[inv.function.name] = (invocations + 1, messages + len(inv.deliveries))
            return found

        def work_tags() -> dict[str, list[str]]:
            """The work tags (Spark job tags) of each invocation held that has any, by its id."""
            return {inv.id: list(tags) for inv in list(dispatcher.invocations) if (tags := inv.work_tags)}

        recorder = next(m for m in parts.middleware.middleware if isinstance(m, ConsoleRecorder))
        watched = [
            Watched(
                lst.function,
                lst.options,
                lst.backend,
                describe(config.connection_string(lst.function.connection), config.base_dir),
                _own_settings(config, lst.options),
            )
            for lst in listeners
        ]
        host = HostParts(self.metrics, parts.scheduler, config, running, endpoints.readiness, work_tags, self.app.not_run)
        return Console(watched, host, recorder, self.facts, actions=parts.token is not None)

    @property
    def elapsed(self) -> float:
        """Seconds since the host was made."""
        return time.monotonic() - self.started_at

    def totals(self) -> dict[str, int]:
        """Every counter summed over functions, for the final log line."""
        table = self.metrics.by_function()
        names = {name for row in table.values() for name in row}
        return {name: self.metrics.get(name) for name in sorted(names)}

    async def _until_drained(self, listeners: list[Listener], dispatcher: Dispatcher, backends: _Storage) -> None:
        """Burst mode: return once no invocation runs and every trigger queue is empty (or on a signal).

        The queues' counts include messages a receive holds but has not handed
        over yet (they are invisible, not gone), and an idle long poll holds none.
        """
        unreachable_since: float | None = None
        while not self.stopping.is_set():
            problem = next((lst.last_error for lst in listeners if lst.last_error), None)
            if not dispatcher.invocations:
                try:
                    counts = [await lst.backend.approximate_count(lst.function.queue_name) for lst in listeners]
                except StorageGone as exc:  # no retry helps: the process must be started again
                    self.faults.report("burst-check", exc)
                    return
                except Exception as exc:  # storage trouble is no reason to stop early, nor to crash
                    problem = f"{type(exc).__name__}: {exc}"
                    log.warning("burst mode cannot count the trigger queues now", error=problem)
                    counts = [1]
                if not dispatcher.invocations and not any(counts):
                    log.info("trigger queues are empty; stopping (burst mode)")
                    await self._say_unread_queues(listeners, backends)
                    return
            now = time.monotonic()
            unreachable_since = None if problem is None else unreachable_since or now
            if unreachable_since is not None and now - unreachable_since >= self.config.burst_storage_timeout:
                self.gave_up = problem
                log.error(
                    "storage unreachable for worker.burstStorageTimeout; burst mode gives up and exits 1",
                    seconds=round(now - unreachable_since),
                    error=problem,
                )
                return
            await wait_set(self.stopping, BURST_CHECK_INTERVAL)

    async def _say_unread_queues(self, listeners: list[Listener], backends: _Storage) -> None:
        """Burst mode's end: warn of messages waiting on queues no function of the app reads (a ``worker send`` to
        a misspelt queue fills one, and the run would otherwise end as if all were done).

        Only where listing the queues is one call and counting one is cheap: the embedded queue and Azure Storage
        (SQS and OCI Queue are left alone). Poison queues and the app's own output queues are not counted (they are
        meant to hold messages), nor the Functions host's own, nor more than :data:`UNREAD_QUEUES_COUNTED` queues of
        a backend; nothing here can fail the run."""
        read = {lst.function.queue_name.lower() for lst in listeners}
        written = {
            binding.queue_name.lower()
            for lst in listeners
            for binding in lst.function.outputs
            if isinstance(binding, OutputBinding)
        }
        waiting: dict[str, int] = {}
        for connection, backend in list(backends.by_connection.items()):
            if backend_kind(connection).name not in UNREAD_QUEUES_KINDS:
                continue
            try:
                async with asyncio.timeout(UNREAD_QUEUES_TIMEOUT):
                    names = [
                        name
                        for name in await backend.list_queues()
                        if name.lower() not in read | written
                        and not is_poison_queue(name)
                        and not name.startswith(FUNCTIONS_OWN_QUEUES)
                    ]
                    for name in names[:UNREAD_QUEUES_COUNTED]:
                        if count := await backend.approximate_count(name):
                            waiting[name] = count
            except Exception as exc:  # a look, not a duty: the run has done its work
                log.debug("could not look for messages on queues no function reads", error=type(exc).__name__)
        if waiting:
            log.warning(
                "messages wait on queues no function of this app reads; a misspelt queue name in worker send?",
                queues=waiting,
                functions_read=sorted(lst.function.queue_name for lst in listeners),
            )

    async def _drain(self, dispatcher: Dispatcher) -> None:
        released = dispatcher.release_unstarted()
        running = len(dispatcher.invocations) - released
        if dispatcher.invocations:
            log.info("draining", running=running, releasing_unstarted=released, drain_timeout=self.config.drain_timeout)
        if await dispatcher.wait_idle(self.config.drain_timeout):
            return
        log.warning(
            "drainTimeout passed; cancelling and releasing unfinished messages", unfinished=len(dispatcher.invocations)
        )
        dispatcher.cancel_all(SHUTDOWN)
        if not await dispatcher.wait_idle(COMPLETION_GRACE):
            log.error(
                "some completions did not finish; their leases will bring the messages back",
                unfinished=len(dispatcher.invocations),
            )
        if not await dispatcher.threads.wait_idle(TIMEOUT_GRACE):
            log.warning(
                "sync handlers still running after cancellation; exiting without them", threads=dispatcher.threads.busy
            )


def unknown_options(app: WorkerApp, middleware: Sequence[Middleware]) -> list[str]:
    """A line for each function option that neither the host (the listener's ``channel``, the dispatcher's
    ``checkpoints``) nor its middleware (the host's own and ``middleware``) declares it reads."""
    declared = {**listener_options, **dispatcher_options, **builtin.function_options(middleware)}
    return [
        f"function {spec.name}: option {name!r} is not one the host or its middleware reads (they read: "
        f"{', '.join(sorted(declared))})"
        for spec in app.functions
        for name in spec.extras
        if name not in declared
    ]


def _options(config: HostConfig, function: FunctionSpec, backend: QueueBackend, *, quiet: bool = False) -> FunctionOptions:
    """The settings ``function`` runs with on ``backend``: a default the service does not take (Functions' batch of
    16 on SQS, which returns 10) takes the service's limit, said in one line; a value the user gave is left as given,
    for the start to refuse."""
    own, adapted = config.for_function(function.name, function.retry, function.settings).within(
        backend.limits, _service(config, function)
    )
    if adapted and not quiet:
        log.info("settings not given take the backend's limit", function=function.name, settings=adapted)
    return own


def _service(config: HostConfig, function: FunctionSpec) -> str:
    """The name of the service ``function``'s trigger queue is on (Amazon SQS, OCI Queue ...), for messages."""
    connection = config.resolve_connection(function.connection, "queue", embedded_default=function.connection is None)
    return backend_kind(connection.value).name


def _own_settings(config: HostConfig, own: FunctionOptions) -> dict[str, object]:
    """The settings a function runs with that differ from the global ones, for its "function loaded" line: of the
    per-function settings' table (:mod:`worker.settings.function_settings`), those its section may set."""
    changed: dict[str, object] = own.apart_from(config)
    if "retry" in changed and own.retry is not None:
        changed["retry"] = own.retry.describe()
    return changed


async def _queue_problem(backend: QueueBackend, queue: str, options: FunctionOptions) -> str | None:
    """Why a trigger queue cannot be served as configured, found at start; None when it can.

    Where the service creates queues quickly (Azure Storage, the embedded
    queue) the trigger queue is created, so that a fresh deployment needs no
    set-up step. Elsewhere (OCI Queue: a queue is a cloud resource with its
    own settings) it must exist, and so must where its poison goes: the
    service's dead-letter queue, which needs a delivery limit, or an existing
    ``<queue>-poison``.
    """
    if backend.capabilities.creates_queues:
        await backend.create_queue(queue)
    else:
        try:
            await backend.approximate_count(queue)
        except QueueNotFound as exc:
            return f"{exc}; this host does not create queues there"
    return await (await looked_up_policy(backend, queue)).startup_problem(queue, options.max_dequeue_count)


#: host.json keys every Functions app carries (the templates write them) that mean nothing here: said at DEBUG only.
ROUTINE_HOST_JSON_KEYS = frozenset({"extensionBundle", "logging.applicationInsights"})


def _say_ignored(config: HostConfig, retry_in_code: Sequence[str]) -> None:
    """Say once what of a Functions app's settings this host accepts and does not apply.

    Why: a key copied from host.json must load, but a user should not believe it works. Retry policies get one
    warning of their own, since Functions does not apply them to queue triggers either and the attempts follow the
    queue's settings; the keys every Functions app carries (``extensionBundle``) would only be noise at each start.
    """
    file = str(config.source) if config.source else None
    retry_in_settings = "retry" in config.ignored_keys
    if retry_in_settings or retry_in_code:
        log.warning(
            "retry policies are not applied to queue triggers, as in Functions: failed messages are retried "
            "after visibilityTimeout up to maxDequeueCount times",
            host_json=file if retry_in_settings else None,
            functions=list(retry_in_code),
            visibility_timeout=config.visibility_timeout,
            max_dequeue_count=config.max_dequeue_count,
        )
    routine = [key for key in config.ignored_keys if key in ROUTINE_HOST_JSON_KEYS]
    if routine:
        log.debug("host.json keys every Functions app carries, not used here", keys=routine, file=file)
    for key in config.ignored_keys:
        if key != "retry" and key not in ROUTINE_HOST_JSON_KEYS:
            log.warning("settings key is accepted for host.json compatibility but has no effect here", key=key, file=file)
