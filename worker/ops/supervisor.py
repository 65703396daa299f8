"""Several worker processes under one supervisor: ``worker run --processes N`` (``worker.processes``).

A process runs Python on one core (the GIL), so CPU-bound handlers scale with processes.
Each child is a whole host: one that dies loses nothing, and restarts after a growing back-off.
A child recycled past functionTimeout (:mod:`worker.runtime.recycle`) is replaced at once.
With one process, any other exit ends ``worker run`` with the child's code.
The supervisor never imports the app; its children die with it and leave nothing behind.
Signals, start-up order and leftovers: ARCHITECTURE.md, "Design notes".
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from worker.runtime import inflight
from worker.runtime.handover import HANDOVER_ENV, RECYCLED, recycle_reason
from worker.runtime.inflight import INFLIGHT_ENV
from worker.runtime.signals import FORWARDED, STOP_SIGNALS, Stop, StopSignals, read_after_stop
from worker.settings.http_token import BearerToken
from worker.waits import wait_set

if TYPE_CHECKING:
    from worker.ops.front import Front

log = structlog.get_logger("worker.ops.supervisor")

#: First wait before a child that died is started again; it doubles while children keep dying, up to the ceiling.
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 60.0
#: A child that ran this long before dying is restarted after the first delay again.
STABLE_AFTER = 60.0
#: Exit code of ``worker run`` when the app or its settings are refused; restarting cannot help.
REFUSED = 2
#: The environment variable that tells a child its supervisor's process id.
SUPERVISOR_ENV = "WORKER_SUPERVISOR_PID"
#: The environment variable that tells a child its place among the supervisor's processes (0, 1, ...).
PROCESS_INDEX_ENV = "WORKER_PROCESS_INDEX"
#: What process 0 sends its supervisor once it has loaded and checked the app: the others may load it then.
APP_LOADED_SIGNAL = signal.SIGUSR1
#: The environment variable that names the pipe a process other than the first reads before it loads the app: a byte
#: when process 0 has loaded it, the end of the pipe when the supervisor stops first.
APP_GATE_ENV = "WORKER_APP_GATE_FD"
#: Where the children listen when the supervisor serves the endpoints for them: reachable from this machine only.
CHILD_HOST = "127.0.0.1"
#: prctl(2)'s option for the signal a process gets when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1
#: prctl(2)'s option that makes a process the parent of its orphaned descendants (Linux).
_PR_SET_CHILD_SUBREAPER = 36
#: Seconds a process left behind by a worker process gets between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 3.0
#: Longest the supervisor spends ending leftovers at one time: each SIGKILL may orphan a leftover's own children.
LEFTOVER_DEADLINE = 10.0


@dataclass
class Child:
    """One worker process and what the supervisor knows of it."""

    index: int
    port: int | None
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    recycles: int = 0
    finished: bool = False
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Runs ``count`` copies of ``command`` (a ``worker run`` without ``--processes``) until stopped."""

    def __init__(
        self,
        command: Sequence[str],
        count: int,
        *,
        http_port: int = 0,
        http_host: str = "0.0.0.0",
        token: BearerToken | None = None,
        open_data: bool = False,
        allowed: Sequence[str] = (),
        burst: bool = False,
        env: dict[str, str] | None = None,
        child_env: Sequence[Mapping[str, str]] = (),
    ) -> None:
        """``token``, ``open_data`` (``worker.httpOpenData``) and ``allowed`` (``worker.httpAllowedHosts``) guard the
        endpoints the supervisor serves for several processes (:mod:`worker.runtime.guard`). ``child_env``, when
        given, holds what each process's environment has beside the rest, by its place (a SAM template's functions,
        one a process): ``count`` processes each."""
        self.command = list(command)
        self.child_env = [dict(extra) for extra in child_env for _ in range(count)]
        count = len(self.child_env) or count
        self.count = count
        self.http_host = http_host
        self.burst = burst
        self.env = dict(os.environ if env is None else env)
        # One child serves the port itself; several each get a loopback port of their own behind the supervisor's.
        ports = [http_port or None] if count == 1 else [_free_port() if http_port else None for _ in range(count)]
        self.children = [Child(index, port) for index, port in enumerate(ports)]
        self.front: Front | None = None
        if http_port and count > 1:  # the web framework is imported only by a supervisor that serves a port
            from worker.ops.front import Front

            self.front = Front([port for port in ports if port], CHILD_HOST, http_host, http_port, token, open_data, allowed)
        self.stopping = asyncio.Event()
        self._gate: tuple[int, int] | None = None  # (read, write) of the pipe the others wait on; None once open
        self._signals = StopSignals()
        self._last_signal = 0
        self._refused = False
        self._handovers: Path | None = None
        self._starting = 0  # worker processes being started: pids that are the supervisor's but not yet known
        self._sweeping = asyncio.Lock()  # processes exiting together: one sweep ends their leftovers, once

    async def run(self) -> int:
        """Start the children, keep them running, and return the exit code once all have stopped."""
        runner = await self.front.serve() if self.front is not None else None  # CannotListen: nothing started
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self._signal, signum)
        if self.count > 1:
            self._gate = os.pipe()
        loop.add_signal_handler(APP_LOADED_SIGNAL, self._open_gate)  # before any child can send it
        adopt_orphans()  # before any child can leave one
        # Holds message bodies for a moment: readable by this user only (mkdtemp makes it 0700).
        self._handovers = Path(tempfile.mkdtemp(prefix="worker-handover-"))
        log.info("supervisor started", processes=self.count, pid=os.getpid(), burst=self.burst)
        try:
            await asyncio.gather(*(self._keep(child) for child in self.children))
        finally:
            for signum in (*STOP_SIGNALS, APP_LOADED_SIGNAL):
                loop.remove_signal_handler(signum)
            self._close_gate()
            # worker run's own process: a late copy of a stop signal must not end it as it cleans up.
            read_after_stop(self._signals, STOP_SIGNALS)
            # Every worker process has exited: whatever is left is a handler's. A second signal asked for an exit at
            # once: no grace for them either.
            await self.end_leftovers(grace=0 if self._signals.exit_now else LEFTOVER_GRACE)
            if runner is not None:
                await runner.cleanup()
            shutil.rmtree(self._handovers, ignore_errors=True)
        exits = [child.exits[-1] if child.exits else 0 for child in self.children]
        log.info("supervisor stopped", exits=exits, restarts=sum(child.restarts for child in self.children))
        if self._refused:
            return REFUSED
        if self._signals.exit_now:
            return 128 + self._last_signal
        if self.count == 1:  # one process: worker run exits as it did (killed by a signal: 128 + its number)
            return 128 - exits[0] if exits[0] < 0 else exits[0]
        return 0 if all(code == 0 for code in exits) else 1

    def _signal(self, signum: int) -> None:
        """Pass the signal on to every child (as its :data:`FORWARDED` signal); the first also stops restarts."""
        if self._signals.receive(signum)[0] is Stop.REPEATED:
            return
        self._last_signal = signum
        log.info(
            "signal received; passing it to the worker processes",
            signal=signal.Signals(signum).name,
            processes=sum(1 for child in self.children if _alive(child)),
        )
        self._stop_children(signum)

    def _stop_children(self, signum: int) -> None:
        """Stop restarts and pass ``signum`` on to every live child, as its :data:`FORWARDED` signal.

        Apart from :meth:`_signal` so that the supervisor's own stop (a process refused the app) is not logged, nor
        counted, as a signal received: the user's first signal after it still drains.
        """
        self.stopping.set()
        waiting = self._gate is not None  # processes 1.. still wait at the gate: its end alone ends them, quietly
        self._close_gate()
        for child in self.children:
            if _alive(child) and not (waiting and child.index > 0):
                assert child.process is not None
                child.process.send_signal(FORWARDED[signal.Signals(signum)])

    async def _keep(self, child: Child) -> None:
        """Run one child, starting it again whenever it dies, until the supervisor stops."""
        delay = RESTART_DELAY
        while True:
            code = await self._run_once(child)
            child.exits.append(code)
            await self.end_leftovers()
            if self.stopping.is_set() or (self.burst and code == 0):
                return
            if code == REFUSED:
                log.error("worker process refused its app or settings; not restarting", process=child.index)
                self._refused = True
                if not self.stopping.is_set():
                    self._stop_children(signal.SIGTERM)
                return
            held = inflight.read(self._file(child, "in-flight"))
            if code == RECYCLED and (reason := recycle_reason(self._file(child, "handover"))) is not None:
                # Not a crash: a fresh process at once, which settles the timed-out message.
                child.recycles += 1
                log.warning(
                    "worker process recycled; starting a fresh one",
                    process=child.index,
                    reason=reason,
                    recycles=child.recycles,
                )
                continue
            ran = time.monotonic() - child.started_at
            # Nobody asked it to stop: os._exit in a handler, a crash, the out-of-memory killer.
            died = {
                "process": child.index,
                "pid": child.process.pid if child.process else None,
                "exit_code": code,
                "cause": exit_cause(code),
                "ran_seconds": round(ran, 1),
                **_held(held),
            }
            if self.count == 1:  # its exit is worker run's, as without a supervisor: the platform restarts it
                log.error("worker process died; worker run exits with its code", **died)
                return
            if ran >= STABLE_AFTER:
                delay = RESTART_DELAY
            child.restarts += 1
            log.error("worker process died; restarting it", **died, restart_in=delay, restarts=child.restarts)
            if await wait_set(self.stopping, delay):
                return
            delay = min(delay * 2, RESTART_DELAY_MAX)

    def _open_gate(self) -> None:
        """Process 0 has loaded and checked the app: let every process waiting at the gate load it too."""
        if self._gate is not None:
            os.write(self._gate[1], b"1" * self.count)  # a byte for each waiting process (at most count - 1)
            self._close_gate()

    def _close_gate(self) -> None:
        """No process waits at the gate from now on: after the app loaded (restarted processes load it at once), or
        when the supervisor stops (the waiting ones read the pipe's end and exit without loading it)."""
        if self._gate is not None:
            for end in self._gate:
                os.close(end)
            self._gate = None

    async def _run_once(self, child: Child) -> int:
        assert self._handovers is not None
        extra = self.child_env[child.index] if self.child_env else {}
        env = {
            **self.env,
            **extra,
            "WORKER__worker__processes": "1",
            PROCESS_INDEX_ENV: str(child.index),
            SUPERVISOR_ENV: str(os.getpid()),
            HANDOVER_ENV: str(self._file(child, "handover")),
            INFLIGHT_ENV: str(self._file(child, "in-flight")),
        }
        env["WORKER__worker__httpPort"] = str(child.port or 0)
        if self.front is not None:  # the supervisor's console is the one to open, not a process's own
            from worker.runtime.guard import CONSOLE_ELSEWHERE_ENV  # the web framework is imported already

            env[CONSOLE_ELSEWHERE_ENV] = "1"
        host = self.http_host if self.count == 1 else CHILD_HOST
        gate: tuple[int, ...] = ()
        if child.index > 0 and self._gate is not None:  # process 0 has not loaded the app yet: wait for it
            gate = (self._gate[0],)
            env[APP_GATE_ENV] = str(self._gate[0])
        self._starting += 1
        try:
            child.process = await asyncio.create_subprocess_exec(*self.command, "--http-host", host, env=env, pass_fds=gate)
        finally:
            self._starting -= 1
        child.started_at = time.monotonic()
        log.info(
            "worker process started", process=child.index, pid=child.process.pid, **({"environment": extra} if extra else {})
        )
        code = await child.process.wait()
        log.info("worker process exited", process=child.index, pid=child.process.pid, exit_code=code)
        return code

    async def end_leftovers(self, grace: float = LEFTOVER_GRACE) -> None:
        """End the processes a worker process left behind: SIGTERM, then SIGKILL after ``grace`` seconds.

        Why: a handler's forked child that ignores SIGTERM (or a daemon it started) would hold the queue file, a
        port or a lease's work after ``worker run`` ended, where nobody stops it. As the subreaper, the supervisor
        has them as children once their worker process exits; its only other children are the worker processes.
        """
        async with self._sweeping:
            await self._sweep(grace)

    async def _sweep(self, grace: float) -> None:
        deadline = time.monotonic() + LEFTOVER_DEADLINE
        kill_at: dict[int, float] = {}  # each leftover signalled, and when it gets SIGKILL
        while not self._starting:  # a process being started is not known yet: the next sweep looks again
            workers = {child.process.pid for child in self.children if child.process is not None}
            left = [pid for pid in children_of(os.getpid()) if pid not in workers and not _reaped(pid)]
            now = time.monotonic()
            if not left or now >= deadline:
                if left:
                    log.error("processes left by a worker process are still running", pids=left)
                return
            if fresh := [pid for pid in left if pid not in kill_at]:
                log.warning("processes a handler started outlived their worker process; ending them", pids=fresh)
                for pid in fresh:
                    _send(pid, signal.SIGTERM)
                    kill_at[pid] = now + grace
            if overdue := [pid for pid in left if kill_at[pid] <= now]:
                log.warning("left-over processes ignored SIGTERM; killing them", pids=overdue)
                for pid in overdue:
                    _send(pid, signal.SIGKILL)
                    kill_at[pid] = math.inf
            await asyncio.sleep(0.05)

    def _file(self, child: Child, kind: str) -> Path:
        """The file of ``kind`` ("handover", "in-flight") the supervisor names for ``child``."""
        assert self._handovers is not None
        return self._handovers / f"process-{child.index}.{kind}.json"


def exit_cause(code: int) -> str:
    """A process's exit code in words: the signal that killed it, or the code it exited with."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _held(invocations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a dead process last said it held, for the log: its invocations per function and up to 20 message ids
    (they come back when their leases end)."""
    functions: dict[str, int] = {}
    messages = []
    for invocation in invocations:
        functions[invocation["function"]] = functions.get(invocation["function"], 0) + 1
        messages += invocation["messages"]
    return {"held_invocations": functions, "held_messages": len(messages), "message_ids": messages[:20]}


def _alive(child: Child) -> bool:
    return child.process is not None and child.process.returncode is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((CHILD_HOST, 0))
        return int(s.getsockname()[1])


def adopt_orphans() -> None:
    """Make this process the parent of its descendants whose parent exits (Linux's child subreaper); elsewhere, a
    handler's leftover processes are re-parented to init as before."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)


def children_of(parent: int) -> list[int]:
    """The pids whose parent is ``parent``, from /proc (none where there is no /proc)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()  # the name in parentheses may hold anything
        except OSError:  # gone meanwhile
            continue
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(entry))
    return found


def _reaped(pid: int) -> bool:
    """Collect ``pid``'s exit if it has exited (a leftover is the supervisor's child): True once it is gone."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not a child (any more)
        return True


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def die_with_supervisor(supervisor: int) -> None:
    """Make this child end when its supervisor does, even by ``kill -9``: as one process would, nothing lives on.

    Linux sends the parent-death signal; elsewhere a child outlives a killed
    supervisor until it is stopped. A supervisor that died before this call
    is seen by the parent id having changed.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor:
        os._exit(128 + signal.SIGKILL)


def wait_for_the_first_process(environ: Mapping[str, str]) -> bool:
    """In a process other than the first: wait until process 0 has loaded the app (True), or its supervisor stopped
    first (False: the app is not to be loaded); True at once in any other process.

    Everything before the app (Python's start, the worker's imports, the settings) has run by then, side by side
    with process 0's; only the app's import waits, so that a refused app is refused once.
    """
    gate = environ.get(APP_GATE_ENV)
    if gate is None:
        return True
    with os.fdopen(int(gate), "rb", buffering=0) as pipe:
        try:
            return pipe.read(1) == b"1"
        except KeyboardInterrupt:  # Ctrl-C reached the whole process group: nothing loaded, nothing to drain
            return False


def child_command(app: str, config: str | None, log_level: str | None, burst: bool) -> list[str]:
    """The ``worker run`` each child runs: the same app, settings file and options, one process, no supervisor."""
    command = [sys.executable, "-m", "worker", "run", "--no-supervisor", "--app", app]
    if log_level is not None:
        command += ["--log-level", log_level]
    if config is not None:
        command += ["--config", config]
    if burst:
        command.append("--burst")
    return command
