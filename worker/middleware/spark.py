"""Spark as middleware: one SparkSession per worker process, every invocation's Spark jobs bound to its lease.

:func:`worker.middleware.builtin.standard` adds it where Spark is asked for, from host.yaml's ``spark:``.
With a ``spark=True`` function, ``host_started`` warms a session in a thread while other functions run.
Until it is ready, Spark functions receive nothing, so no attempt waits on it; a failed start is retried.
Jobs are tagged per invocation: ``on_interrupt`` cancels exactly those, and the message is released.
The host stops only a session this middleware made. Spark belongs in sync handlers (tags are per thread).
The JVM logs to ``.worker/spark.log`` beside host.yaml.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

import structlog

from worker.backends.embedded.files import private_file
from worker.dependencies import version
from worker.invocation import Invocation, current_invocation
from worker.middleware import Middleware
from worker.middleware.connect_jobs import ConnectWebUi, cancel_left_jobs
from worker.middleware.spark_settings import FUNCTION_OPTIONS, SECTION, SparkSettings, from_config
from worker.model import FunctionSpec
from worker.settings.config import FunctionOptions
from worker.settings.sections import SectionSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from worker.settings.config import HostConfig

log = structlog.get_logger("worker.spark")

#: The provider :func:`worker.spark.session` answers with: set by :class:`Spark` for each invocation's context.
active_provider: contextvars.ContextVar[SparkProvider | None] = contextvars.ContextVar("spark_provider", default=None)

#: How often an interrupted invocation's Spark jobs are cancelled again, until its handler returns.
CANCEL_REPEAT_SECONDS = 0.5
#: The pause before a failed start is tried again, doubled after each failure up to the longest.
RESTART_FIRST_SECONDS = 5.0
RESTART_LONGEST_SECONDS = 60.0

T = TypeVar("T")


def _use_this_interpreter(conf: dict[str, str]) -> None:
    """Start Spark's Python workers with the worker's own interpreter, so that they can import the app and its packages.

    PySpark starts them with ``PYSPARK_PYTHON``, else ``python3`` from PATH:
    for a worker started as ``.venv/bin/worker`` without an activated venv
    that is another Python, and a handler's ``rdd.map(f)`` or UDF fails with
    ModuleNotFoundError. ``spark.pyspark.python`` in ``spark.conf`` (which
    in-process PySpark does not read by itself) or ``PYSPARK_PYTHON`` set by
    the user win. On a cluster of several hosts that path must exist on every
    executor: the same image, or an environment shipped with ``spark.archives``.
    """
    if os.environ.get("PYSPARK_PYTHON"):
        return
    chosen = conf.get("spark.pyspark.python") or sys.executable
    os.environ["PYSPARK_PYTHON"] = chosen
    log.info("Spark's Python workers use this interpreter", python=chosen)


#: What a Spark Connect server answers a session that sets one of its own settings.
_SERVER_SETTINGS = ("CANNOT_MODIFY_CONFIG", "CANNOT_MODIFY_STATIC_CONFIG")


def _set_on_connect(session: SparkSession, conf: dict[str, str]) -> None:
    """Set ``spark.conf`` on a Connect session, leaving to the server the settings it keeps for itself.

    A settings file shared by local runs and Connect runs (the sample's
    host.yaml) holds settings of a driver (``spark.ui.enabled``,
    ``spark.executor.memory``) or static ones (``spark.sql.warehouse.dir``)
    that a Connect server refuses from a session. Given through the session
    builder, each such refusal became a warning with the server's error on
    every run; which keys are refused only the server knows (an unknown key of
    the app's own is taken), so each key is set on its own, and the refused
    ones are named in one line saying where they belong.
    """
    from pyspark.errors import AnalysisException

    left: list[str] = []
    for key, value in conf.items():
        try:
            session.conf.set(key, value)
        except AnalysisException as exc:
            if exc.getCondition() not in _SERVER_SETTINGS:
                raise
            left.append(key)
    if left:
        log.info(
            "Spark settings left to the Connect server: a session cannot set them; give them to the server where it starts",
            keys=left,
        )


#: PySpark's private parts this middleware relies on, by class: for a classic session, the process's JVM (its
#: process, found dead or killed at a deadline; its log put in a file; forgotten once gone) and the session PySpark
#: keeps; for a Connect one, the client's release with a deadline. Checked before Spark starts
#: (:func:`private_parts_problem`): no fallback keeps those promises, so a PySpark without them is refused.
_CLASSIC_PARTS = {
    "pyspark:SparkContext": ("_gateway", "_jvm", "_lock"),
    "pyspark.sql:SparkSession": ("_instantiatedSession", "_activeSession"),
}
_CONNECT_PARTS = {"pyspark.sql.connect.client:SparkConnectClient": ("set_retry_policies", "release_session", "close")}
#: What the source of a function must assign for the parts only an instance holds.
_CLASSIC_ASSIGNED = {"pyspark.java_gateway:launch_gateway": "gateway.proc", "pyspark:SparkContext": "self._jsc"}
_CONNECT_ASSIGNED = {"pyspark.sql.connect.session:SparkSession": "self.release_session_on_close"}


def _find(target: str) -> object:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def private_parts_problem(remote: bool) -> str | None:
    """Why the installed PySpark cannot run this middleware's sessions (classic, or Connect where ``remote``): a
    private part it relies on is missing or moved; None when every one is there, or when PySpark is not installed
    (a handler's call then fails as it would anyway). One line, naming PySpark's version, for start-up's problems."""
    if importlib.util.find_spec("pyspark") is None:
        return None
    parts, assigned = (_CONNECT_PARTS, _CONNECT_ASSIGNED) if remote else (_CLASSIC_PARTS, _CLASSIC_ASSIGNED)
    missing: list[str] = []
    try:
        for target, names in parts.items():
            owner = _find(target)
            missing += [f"{target.partition(':')[2]}.{name}" for name in names if not hasattr(owner, name)]
        for target, text in assigned.items():
            try:
                source = inspect.getsource(_find(target))  # type: ignore[arg-type]
            except (OSError, TypeError):  # no source to read (a frozen install): nothing to go by
                continue
            if text not in source:
                missing.append(f"{target.partition(':')[2]} no longer sets {text}")
        if not remote and "popen_kwargs" not in inspect.signature(_find("pyspark.java_gateway:launch_gateway")).parameters:  # type: ignore[arg-type]
            missing.append("launch_gateway takes no popen_kwargs")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("pyspark"):
            return None  # the Connect extra is not installed: the session's start says so, as it always did
        missing.append(f"{type(exc).__name__}: {exc}")
    except (ImportError, AttributeError) as exc:
        missing.append(f"{type(exc).__name__}: {exc}")
    if not missing:
        return None
    return (
        f"spark: pyspark {version('pyspark')} is not as this worker expects ({'; '.join(missing)}); install the "
        "pyspark of constraints.txt"
    )


def start_problem(functions: Sequence[FunctionSpec], given: Sequence[Middleware], config: HostConfig) -> str | None:
    """The private-parts problem of the PySpark the host would run (:func:`private_parts_problem`), where Spark is
    asked for: a function declared with ``spark=True``, a ``spark:`` section, or a Spark middleware of the app's."""
    providers = [m.provider for m in given if isinstance(m, Spark)]
    if not providers and not config.sections.get(SECTION.name) and not any(f.extra("spark") for f in functions):
        return None
    if providers:
        master = providers[0].settings.master
    else:
        try:
            master = from_config(config).master
        except Exception:  # a wrong spark: section is listed by the section's own check
            return None
    return private_parts_problem(master.startswith("sc://"))


def tag_for(invocation: Invocation) -> str:
    """The Spark job tag of an invocation (tags may not contain commas)."""
    return f"worker-invocation-{invocation.id}"


class SparkUnavailable(RuntimeError):
    """No session for the handler: the host gave up on its invocation before Spark was ready, or stopped."""


class SparkTimeout(RuntimeError):
    """Spark (its JVM, or the Connect server) did not answer within a deadline: the call was abandoned."""


def _bounded(seconds: float, what: str, call: Callable[[], T], abort: Callable[[], object]) -> T:
    """``call()`` in this thread, or :class:`SparkTimeout` once ``seconds`` have passed.

    Neither py4j nor the Connect client puts a deadline on a call, and a call
    cannot be left behind in a thread of its own without that thread living for
    as long as the server stays silent. So at the deadline a timer runs
    ``abort``, which closes what the call waits on (the Connect channel, or the
    JVM this process started): the call then fails at once, and this thread goes
    on. A call that returned after the abort ran counts as timed out too, since
    what it returned was closed under it.
    """
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        try:
            abort()
        except Exception as exc:
            log.warning("abandoning a Spark call that did not answer failed", error=f"{type(exc).__name__}: {exc}")

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        result = call()
    except Exception as exc:
        if expired.is_set():
            raise SparkTimeout(f"Spark did not answer in {seconds:g} s ({what})") from exc
        raise
    finally:
        timer.cancel()
    if expired.is_set():
        raise SparkTimeout(f"Spark did not answer in {seconds:g} s ({what})")
    return result


class SparkProvider:
    """Makes the SparkSession (in the background as the host starts, or at first use), hands it out alive, tags
    invocations' jobs, and stops it at shutdown.

    A session that died (its JVM exited, its SparkContext was stopped, its
    Connect server went away or restarted) is found by one cheap call before it
    is handed to a handler, and made again, so that one lost server costs the
    invocations that were running on it and not every one after.
    """

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        #: Sessions made so far: 1 once Spark has started, more after each session that died was made again.
        self.starts = 0
        self._session: SparkSession | None = None
        #: Guards the fields below; never held while a session is made or checked (seconds, or a server's
        #: timeout), so the event loop, which asks for readiness and interrupts, waits for a few lines at most.
        self._lock = threading.Condition()
        #: A thread is making the session; the others wait for it.
        self._building = False
        #: Why the last start failed, until one succeeds.
        self._failure: str | None = None
        #: Stopped with the host: a session still being made is stopped when it is ready.
        self._closed = False
        #: Per invocation id, how to cancel the jobs of each handler thread that tagged them.
        self._tagged: dict[str, list[tuple[Callable[[], object], str, threading.Event, Callable[[], object] | None]]] = {}
        #: Called, outside the lock, each time a start ends (made or failed): see :meth:`watch`.
        self._watchers: tuple[Callable[[], object], ...] = ()

    @property
    def remote(self) -> bool:
        """True for Spark Connect, whose tags and interrupts are the session's, not the SparkContext's."""
        return self.settings.master.startswith("sc://")

    def start(self) -> None:
        """Make the session in a thread of its own, and warm it with a tiny job, unless it is made or being made.

        The host goes on receiving meanwhile, so queue work that needs no Spark
        is not held up; a handler that asks for the session waits for this one.
        """
        with self._lock:
            if self._session is not None or self._building or self._closed:
                return
            self._building = True
        threading.Thread(target=self._start_in_background, name="spark-start", daemon=True).start()

    def _start_in_background(self) -> None:
        # A failure is logged and kept for /readyz by _make; the next handler that asks tries again.
        with contextlib.suppress(Exception):
            self._make(warm_up=True)

    def watch(self, changed: Callable[[], object]) -> Callable[[], None]:
        """Have ``changed`` called, in the thread that made or failed to make the session, each time a start ends
        (see :meth:`ready` and :meth:`problem`); returns what undoes it."""
        with self._lock:
            self._watchers = (*self._watchers, changed)

        def unwatch() -> None:
            with self._lock:
                self._watchers = tuple(w for w in self._watchers if w is not changed)

        return unwatch

    def ready(self) -> bool:
        """Whether a session is made and not being made again: a handler that asks now gets it without waiting."""
        with self._lock:
            return self._session is not None and not self._building and not self._closed

    def problem(self) -> str | None:
        """Why Spark is not ready for handlers (starting, or why it did not start), for ``/readyz``; None when it is
        (or when nothing has asked for it)."""
        with self._lock:
            if self._building and self._failure is not None:
                return f"Spark starting again; the last start failed: {self._failure}"
            if self._building:
                return "Spark starting"
            if self._session is None and self._failure is not None:
                return f"Spark did not start: {self._failure}"
        return None

    def session(self) -> SparkSession:
        """The session, alive; inside a handler, its thread's jobs are tagged with the invocation.

        While Spark is starting this waits for it, until the host gives up on
        the invocation (functionTimeout, a lost lease, shutdown): then it raises
        :class:`SparkUnavailable`, as it does at once when there is no session
        and the host has given up already (none is started for such a call).
        """
        invocation = current_invocation.get()
        spark = self._live(invocation)
        if invocation is not None:
            self._tag(spark, invocation)
        return spark

    def _live(self, invocation: Invocation | None) -> SparkSession:
        """Wait while another thread makes the session; make it here when there is none, or when it died."""
        while True:
            with self._lock:
                if self._building:
                    log.info("waiting for Spark to start")
                    self._lock.wait_for(lambda: not self._building or _given_up(invocation))
                    if self._building:
                        raise SparkUnavailable("the host gave up on the invocation while Spark was starting")
                    continue
                if self._closed:
                    raise SparkUnavailable("Spark was stopped with the host")
                spark = self._session
                if spark is None and _given_up(invocation):
                    # Starting Spark takes seconds, past a timed-out sync handler's grace: the process would be
                    # recycled for an attempt that is already over. The next invocation that needs Spark makes it.
                    raise SparkUnavailable("the host gave up on the invocation before Spark was started")
                if spark is None:
                    self._building = True  # this thread makes it (a start that failed, or no start with the host)
            if spark is None:
                return self._make(warm_up=False)
            if (death := self._death(spark)) is None:
                return spark
            with self._lock:
                if self._session is not spark or self._building:
                    continue  # another thread found it dead first
                self._session, self._building = None, True
            log.warning("the Spark session is gone; starting another", master=self.settings.master, reason=death)
            _discard(spark, self.remote, self.settings.check_timeout)
            return self._make(warm_up=False)

    def _make(self, *, warm_up: bool) -> SparkSession:
        """Make the session (the calling thread set ``_building``), keep it, and wake whoever waits for it."""
        began = time.monotonic()
        made: list[SparkSession] = []

        def build() -> SparkSession:
            spark = self._build(made)
            if warm_up:
                # The first jobs of a session are slow (code generation, class loading, executors to register):
                # paid here, before any message, rather than by the first handler.
                spark.range(0, 16, numPartitions=2).selectExpr("sum(id)").collect()
            return spark

        try:
            spark = _bounded(
                self.settings.start_timeout,
                "making the session" + (" and its warm-up job" * warm_up),
                build,
                lambda: self._abandon(made),
            )
        except Exception as exc:
            failure = str(exc) if isinstance(exc, SparkTimeout) else f"{type(exc).__name__}: {exc}"
            log.error("Spark did not start", master=self.settings.master, error=failure)
            if made:  # a session made before the failure (its warm-up failed, or the deadline passed) is not kept
                _discard(made[0], self.remote, self.settings.check_timeout)
            elif not self.remote:
                _forget_dead_jvm()  # a JVM killed by the deadline before its session was made
            with self._lock:
                self._building, self._failure = False, failure
                self._lock.notify_all()
            self._changed()
            raise
        with self._lock:
            self._building, self._failure, closed = False, None, self._closed
            if not closed:
                self._session = spark
                self.starts += 1
            self._lock.notify_all()
        if closed:
            _discard(spark, self.remote, self.settings.check_timeout)
            raise SparkUnavailable("the host stopped while Spark was starting")
        log.info(
            "Spark ready",
            master=self.settings.master,
            seconds=round(time.monotonic() - began, 3),
            warmed_up=warm_up,
            starts=self.starts,
        )
        self._changed()
        return spark

    def _changed(self) -> None:
        """Tell the watchers that a start ended; one that fails is logged, and the session is handed out anyway."""
        for changed in self._watchers:
            try:
                changed()
            except Exception as exc:
                log.error("a watcher of Spark's start failed", error=f"{type(exc).__name__}: {exc}")

    def _death(self, spark: SparkSession) -> str | None:
        """Why the session can run no more jobs; None while it can. One call to the JVM or the Connect server.

        Classic: the JVM process exited, or its SparkContext stopped (a
        standalone master that removed the application stops it). Connect: the
        client was closed, or the server does not answer or is another one (a
        restarted server knows nothing of the session, and says so).
        """
        if self.remote:
            if _connect(spark).is_stopped:
                return "the Connect session was closed"
            try:
                self._check(lambda: spark.conf.get("spark.sql.session.timeZone"), [spark])
            except SparkTimeout as exc:
                return f"the Connect server does not answer: {exc}"
            except Exception as exc:
                return f"the Connect server refused the session: {type(exc).__name__}: {exc}"
            return None
        from py4j.protocol import Py4JError
        from pyspark import SparkContext

        process = getattr(SparkContext._gateway, "proc", None)
        if process is not None and process.poll() is not None:
            return f"Spark's JVM exited with code {process.returncode}"
        java_context = spark.sparkContext._jsc
        try:
            if java_context is None or self._check(lambda: java_context.sc().isStopped(), [spark]):
                return "the SparkContext was stopped"
        except SparkTimeout as exc:
            return f"Spark's JVM does not answer: {exc}"
        except Py4JError as exc:
            return f"Spark's JVM does not answer: {exc}"
        return None

    def _check(self, call: Callable[[], T], made: list[SparkSession]) -> T:
        """One call that asks whether the session is alive, within ``check_timeout``."""
        return _bounded(self.settings.check_timeout, "checking that the session is alive", call, lambda: self._abandon(made))

    def _abandon(self, made: list[SparkSession]) -> None:
        """Make a Spark call that passed its deadline fail (run by the deadline's timer, see :func:`_bounded`).

        Connect: the session's channel is closed, which ends every call on it. Classic: the JVM this process
        started is killed (the session is being given up anyway); :func:`_discard` then forgets it.
        """
        if self.remote:
            if made:
                made[0].client.set_retry_policies([])
                made[0].client.close()
            return
        from pyspark import SparkContext

        process = getattr(SparkContext._gateway, "proc", None)
        if process is not None:
            log.warning("killing Spark's JVM, which did not answer in time", pid=process.pid)
            process.kill()

    def _build(self, made: list[SparkSession]) -> SparkSession:
        """Make the session, putting it in ``made`` as soon as it exists (so that a deadline can abandon it)."""
        from pyspark.sql import SparkSession

        settings = self.settings
        if problem := private_parts_problem(self.remote):  # refused at start where Spark was asked for; here, a late ask
            raise SparkUnavailable(problem)
        log.info("starting Spark", master=settings.master, app_name=settings.app_name)
        if self.remote:
            # A new session, never one PySpark kept in the process (getOrCreate hands back the process's default
            # session whatever URL it is given: a session of another server, or one given up after a deadline).
            # It takes runtime settings only: the app name, the console progress bar and static settings belong
            # to the server, and are set here only as far as the server takes them.
            session = SparkSession.builder.remote(settings.master).create()
            made.append(session)
            _set_on_connect(session, settings.conf)
        else:
            _use_this_interpreter(settings.conf)
            builder = SparkSession.builder.appName(settings.app_name).master(settings.master)
            conf = {"spark.ui.showConsoleProgress": "false", **settings.conf}
            for key, value in conf.items():
                builder = builder.config(key, value)
            if settings.log_file is not None:
                self._launch_jvm(conf, settings.log_file)
            session = builder.getOrCreate()
            made.append(session)
        _quiet_pyspark_loggers()
        return session

    def _launch_jvm(self, conf: dict[str, str], log_file: Path) -> None:
        """Start Spark's JVM with its stdout and stderr in ``log_file``, unless this process already has one.

        PySpark would start it with the worker's own stderr, where Spark's log
        lines would mix with the worker's JSON lines.
        """
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway

        with SparkContext._lock:
            if SparkContext._gateway is not None:
                return
            private_file(log_file)  # owner-only, as every file the host keeps under .worker/
            spark_conf = SparkConf(loadDefaults=False).setAll(
                [("spark.master", self.settings.master), ("spark.app.name", self.settings.app_name), *conf.items()]
            )
            with log_file.open("ab") as out:
                # pyspark.java_gateway has no annotations.
                SparkContext._gateway = launch_gateway(  # type: ignore[no-untyped-call]
                    spark_conf, popen_kwargs={"stdout": out, "stderr": out}
                )
            SparkContext._jvm = SparkContext._gateway.jvm
            log.info("Spark's own log goes to a file", path=str(log_file))

    def _tag(self, spark: SparkSession, invocation: Invocation) -> None:
        """Tag this thread's Spark jobs with the invocation, once per thread and invocation."""
        tag = tag_for(invocation)
        handler_returned = threading.Event()
        after: Callable[[], object] | None = None
        if self.remote:  # Spark Connect: the session's tags, per thread; interrupting is a call to the server
            if tag in spark.getTags():
                return
            spark.addTag(tag)
            reached: list[str] = []  # the operations an interrupt found running

            def cancel() -> None:
                reached.extend(spark.interruptTag(tag))

            def after() -> None:
                if reached:
                    self._left_jobs(spark, tag)

            invocation.thread_cleanup.append(lambda: spark.removeTag(tag))
        else:
            context = spark.sparkContext
            if tag in context.getJobTags():
                return
            context.addJobTag(tag)
            cancel = lambda: context.cancelJobsWithTag(tag)  # noqa: E731
            invocation.thread_cleanup.append(lambda: context.removeJobTag(tag))
        invocation.add_work_tag(tag)
        with self._lock:
            self._tagged.setdefault(invocation.id, []).append((cancel, tag, handler_returned, after))
        if invocation.interrupted:
            # The host gave up before the handler's first Spark call (a timeout while the session was starting):
            # the interrupt found nothing to cancel, so the jobs of this thread are cancelled from the start.
            # Registered first, then checked: an interrupt in between is seen by one side or both, never neither.
            _cancel_until(cancel, tag, handler_returned, after)

        def returned() -> None:
            handler_returned.set()
            with self._lock:
                self._tagged.pop(invocation.id, None)

        invocation.thread_cleanup.append(returned)

    def _left_jobs(self, spark: SparkSession, tag: str) -> None:
        """After an interrupt reached a Connect operation of ``tag`` and its handler returned: cancel, through the
        server's web UI, any job of the tag the interrupt could not reach (:mod:`worker.middleware.connect_jobs`),
        or say that one may be left."""
        if self.settings.web_ui is None:
            log.warning(
                "an interrupted Spark Connect query may leave a job running on the server (a shuffle stage "
                "submitted as its operation was cancelled); give spark.webUi, the server's web UI, so that "
                "the host cancels such jobs",
                tag=tag,
            )
            return
        cancel_left_jobs(ConnectWebUi(self.settings.web_ui), _connect(spark).session_id, tag)

    def interrupt(self, invocation: Invocation) -> None:
        """Cancel the Spark jobs the invocation's handler started, until it returns (see :func:`_cancel_until`);
        a handler still waiting for Spark to start stops waiting."""
        with self._lock:
            tagged = list(self._tagged.get(invocation.id, ()))
            self._lock.notify_all()
        for cancel, tag, handler_returned, after in tagged:
            _cancel_until(cancel, tag, handler_returned, after)

    def stop(self) -> None:
        """Stop the session; one still being made is stopped as soon as it is ready."""
        with self._lock:
            self._closed = True
            spark, self._session = self._session, None
        if spark is not None:
            log.info("stopping Spark")
            _discard(spark, self.remote, self.settings.check_timeout)


def _given_up(invocation: Invocation | None) -> bool:
    """Whether the host gave up on the invocation (outside one, nobody does)."""
    return invocation is not None and invocation.interrupted


def _connect(spark: SparkSession) -> ConnectSession:
    """``spark`` as the Spark Connect session it is where the master is remote: PySpark's builder is typed as
    making a classic session whatever the master. Imports nothing new: a Connect session's module is loaded."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if not isinstance(spark, ConnectSession):
        raise TypeError(f"a Spark Connect session was expected, not {type(spark).__name__}")
    return spark


def _discard(spark: SparkSession, remote: bool, timeout: float) -> None:
    """Stop a session and forget what PySpark keeps of it in the process, even when its JVM or server is gone.

    Otherwise the next build is handed this session back (PySpark keeps one per
    process), or talks to a JVM that exited. PySpark also marks the whole
    process as Spark Connect once a remote session is built; a later session on
    another master (an in-process host after this one) must not inherit that.
    A Connect session gets one try, of at most ``timeout`` seconds, to release
    itself on the server: the client's own policy retries an unreachable server
    for minutes, and a server that accepts connections but answers nothing
    would hold the release for ever (and with it PySpark's session lock, which
    every later session's build takes); a server drops a session it no longer
    hears from by itself.
    """
    if remote:
        connect = _connect(spark)
        client = connect.client
        client.set_retry_policies([])
        if not connect.is_stopped:
            try:
                _bounded(timeout, "releasing the session", client.release_session, client.close)
            except Exception as exc:
                log.info("the Spark Connect session was not released on the server", error=f"{type(exc).__name__}: {exc}")
        connect.release_session_on_close = False  # tried above; stop() only closes the channel and forgets it
        _stop_quietly(spark)
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None or process.poll() is None:
        _stop_quietly(spark)
        return
    # The JVM is gone: there is nothing to ask it, and spark.stop() would fail half-way, leaving the process's
    # SparkContext in place for the next build to be handed back. Only the Python side is stopped (the accumulator
    # server, the process's active context), and the gateway forgotten: the next session launches a JVM of its own.
    context = spark.sparkContext
    context._jsc = None
    context.stop()
    _forget_dead_jvm()


def _forget_dead_jvm() -> None:
    """Forget the process's JVM once it is gone (killed from outside, or by a deadline before any session was made),
    so that the next session launches a JVM of its own instead of calling one that exited."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = getattr(SparkContext, "_gateway", None)  # none in a PySpark refused at start (private_parts_problem)
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None or process.poll() is None:
        return
    SparkSession._instantiatedSession = SparkSession._activeSession = None
    with SparkContext._lock:
        gateway.close()
        SparkContext._gateway = SparkContext._jvm = None


def _stop_quietly(spark: SparkSession) -> None:
    """Stop a session whose JVM or server may not answer (a restarted Connect server does not know it)."""
    try:
        spark.stop()
    except Exception as exc:
        log.info("the Spark session did not stop cleanly", error=f"{type(exc).__name__}: {exc}")


def _cancel_until(
    cancel: Callable[[], object], tag: str, handler_returned: threading.Event, after: Callable[[], object] | None = None
) -> None:
    """Cancel the tag's jobs now and again every half second until the handler returns, off the event loop; then
    run ``after`` (on Spark Connect, the search for jobs the interrupts could not reach).

    Cancelling a tag only stops the jobs running at that moment; a job the
    handler was about to submit would otherwise run to its end. The calls run
    in a thread of their own: on Spark Connect each is a request to the
    server, and a server that does not answer must not hold up the host's
    event loop (and with it every other lease's renewal).
    """
    log.warning("cancelling the invocation's Spark jobs", tag=tag)

    def keep_cancelling() -> None:
        while True:
            try:
                cancel()
            except Exception as exc:  # a server gone or slow: try again until the handler returns
                log.warning("cancelling Spark jobs failed; trying again", tag=tag, error=f"{type(exc).__name__}: {exc}")
            if handler_returned.wait(CANCEL_REPEAT_SECONDS):
                if after is not None:
                    after()
                return

    threading.Thread(target=keep_cancelling, name=f"cancel-{tag}", daemon=True).start()


def _quiet_pyspark_loggers() -> None:
    """PySpark's Python loggers print JSON of their own to stderr; send them through the worker's log instead."""
    for name in ("pyspark", "SQLQueryContextLogger", "py4j"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        if name == "py4j" and logger.level == logging.NOTSET:  # named in the log settings (logs.QUIET_SDKS): theirs
            continue
        logger.setLevel(logging.ERROR if name == "py4j" else logging.WARNING)


class Spark(Middleware):
    """Puts a :class:`SparkProvider` at the handlers' disposal and cancels an interrupted invocation's Spark jobs.

    ``owned``: the session is this host's, stopped when the host stops. A
    provider handed in by the caller (shared across host runs) is left running.
    """

    function_options: ClassVar[Mapping[str, str]] = FUNCTION_OPTIONS
    #: host.yaml's ``spark:`` section (:mod:`worker.middleware.spark_settings`).
    settings_sections: ClassVar[tuple[SectionSchema, ...]] = (SECTION,)

    def __init__(self, provider: SparkProvider, *, owned: bool = False) -> None:
        self.provider = provider
        self.owned = owned
        #: Guards the fields below, which the provider's watcher changes from the thread that ended a start.
        self._lock = threading.Lock()
        #: Between host_started and host_stopped, with functions that run Spark: failed starts are tried again.
        self._serving = False
        self._unwatch: Callable[[], None] | None = None
        self._restart: threading.Timer | None = None
        self._pause = RESTART_FIRST_SECONDS

    @classmethod
    def from_settings(cls, settings: SparkSettings) -> Spark:
        return cls(SparkProvider(settings), owned=True)

    def host_started(self, functions: Sequence[FunctionSpec]) -> None:
        """Start Spark now, in the background, when a function says it runs Spark (``spark=True``)."""
        if using := [function.name for function in functions if function.extra("spark")]:
            log.info("starting Spark with the host; its functions receive once it is ready", functions=using)
            with self._lock:
                self._serving = True
                self._unwatch = self.provider.watch(self._start_ended)
            self.provider.start()

    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        """Nothing for a function that runs Spark while its session is not ready: a message received now would wait
        for the start within its own functionTimeout, and could end in poison without its handler running a job."""
        return 0 if function.extra("spark") and not self.provider.ready() else room

    def _start_ended(self) -> None:
        """A start ended (in the thread that made it): wake the listeners held back, or try a failed start again."""
        if self.provider.ready():
            with self._lock:
                self._pause = RESTART_FIRST_SECONDS
            self.wake_listeners()
            return
        with self._lock:
            if not self._serving or self.provider.problem() is None:
                return
            pause, self._pause = self._pause, min(self._pause * 2, RESTART_LONGEST_SECONDS)
            if self._restart is not None:
                self._restart.cancel()
            self._restart = threading.Timer(pause, self.provider.start)
            self._restart.name = "spark-start-again"
            self._restart.daemon = True
            self._restart.start()
        log.warning("starting Spark again after a pause; the messages of its functions wait in the queue", seconds=pause)

    def not_ready(self) -> list[str]:
        problem = self.provider.problem()
        return [] if problem is None else [problem]

    def before_invocation(self, invocation: Invocation) -> None:
        # Set in the invocation's own task context, which the handler's task and thread copy: nothing leaks.
        active_provider.set(self.provider)

    def on_interrupt(self, invocation: Invocation) -> None:
        self.provider.interrupt(invocation)

    def host_stopped(self) -> None:
        with self._lock:
            self._serving = False
            unwatch, self._unwatch = self._unwatch, None
            if self._restart is not None:
                self._restart.cancel()
        if unwatch is not None:
            unwatch()
        if self.owned:
            self.provider.stop()
