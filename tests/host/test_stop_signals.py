"""One stop signal is one drain, whoever sends it to whom: real senders, real process groups, real terminals.

A signal sent to a process group reaches the worker process twice, directly and through its supervisor; coreutils'
``timeout`` signals the supervisor and then the group. Each sender below stops a ``worker run`` (a supervisor and
its worker process) in a session of its own while a handler runs; the handler must finish and its message be
deleted. A person's second Ctrl-C still exits at once.

The five workers start together, so that the suite pays for one start, not five.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.runtime.signals import REPEAT_WINDOW

pytestmark = pytest.mark.subprocess

QUEUE = "work"


@dataclass
class Scenario:
    """One worker in a session of its own, holding one message in a handler that runs until its gate opens."""

    name: str
    send: Callable[[WorkerProcess], None]
    worker: WorkerProcess
    folder: Path

    @property
    def record_db(self) -> Path:
        return self.folder / "attempts.sqlite3"

    def events(self, event: str) -> list[str]:
        return [row["message_id"] for row in attempts(self.record_db) if row["event"] == event]

    def draining(self) -> list[str]:
        """Who the host heard a stop signal from ("direct", "the supervisor"); fails once the worker has exited."""
        assert self.worker.proc is not None
        if self.worker.proc.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.worker.proc.returncode} while draining:\n{self.worker.log_path.read_text()}"
            )
        return [line.get("sender", "?") for line in self.worker.lines() if line.get("event") == "signal received; draining"]

    def queued(self) -> int:
        async def count() -> int:
            backend = open_backend(None, self.folder)
            try:
                return await backend.approximate_count(QUEUE)
            finally:
                await backend.close()

        return asyncio.run(count())


def _ctrl_c(worker: WorkerProcess) -> None:
    worker.ctrl_c()


def _timeout(worker: WorkerProcess) -> None:
    # worker.pid is timeout's own: told to stop, it signals the command and then the command's process group, as
    # when its time is up.
    os.kill(worker.pid, signal.SIGTERM)


def _systemd(worker: WorkerProcess) -> None:
    # KillMode=control-group: SIGTERM to the main process, then to every other process of the unit.
    os.kill(worker.pid, signal.SIGTERM)
    for line in worker.lines():
        if line.get("event") == "worker process started":
            os.kill(line["pid"], signal.SIGTERM)


def _kill_group(worker: WorkerProcess) -> None:
    os.killpg(worker.pid, signal.SIGINT)  # kill -INT -PGID


SENDERS: dict[str, tuple[Callable[[WorkerProcess], None], dict[str, object]]] = {
    "ctrl-c": (_ctrl_c, {"terminal": True}),
    "timeout": (_timeout, {"own_session": True, "wrapper": ("timeout", "600")}),
    "systemd": (_systemd, {"own_session": True}),
    "kill-group": (_kill_group, {"own_session": True}),
    "ctrl-c-twice": (_ctrl_c, {"terminal": True}),
}


@pytest.fixture
def scenarios(tmp_path: Path) -> Iterator[dict[str, Scenario]]:
    """Every sender's worker, started at once, each with its message's handler running."""
    started: dict[str, Scenario] = {}
    for name, (send, options) in SENDERS.items():
        folder = tmp_path / name
        folder.mkdir()
        config = write_host_yaml(folder, worker={"drainTimeout": "60s"})
        asyncio.run(_put(folder, f"message of {name}"))
        env = {
            "RECORD_DB": str(folder / "attempts.sqlite3"),
            "HANDLER_MODE": "gate",
            "HOLD_SECONDS": "60",
            "GATE_FILE": str(folder / "gate"),
            "TRIGGER_QUEUE": QUEUE,
        }
        worker = WorkerProcess(config, env, name=name, **options).start()  # type: ignore[arg-type]
        started[name] = Scenario(name, send, worker, folder)
    try:
        for scenario in started.values():
            poll(lambda s=scenario: s.events("start"), 60, what=f"{scenario.name}: the handler to start")
        yield started
    finally:
        for scenario in started.values():
            for line in scenario.worker.lines():
                if line.get("event") == "worker process started":
                    _kill(line["pid"])
            scenario.worker.kill()


async def _put(folder: Path, body: str) -> None:
    backend = open_backend(None, folder)
    try:
        await backend.create_queue(QUEUE)
        await backend.put(QUEUE, encode(body, "base64"))
    finally:
        await backend.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_one_signal_from_any_sender_drains_once_and_a_second_ctrl_c_exits_at_once(
    scenarios: dict[str, Scenario],
) -> None:
    pressed = time.monotonic()
    for scenario in scenarios.values():
        scenario.send(scenario.worker)
    # Each worker process hears the signal twice, from its own sender and from its supervisor; only then may the
    # handler end, or a second signal read as "exit at once" could come after the work is done.
    for scenario in scenarios.values():
        senders = poll(lambda s=scenario: _both(s.draining()), 30, what=f"{scenario.name}: the signal from both")
        assert sorted(senders) == ["direct", "the supervisor"], scenario.name

    twice = scenarios.pop("ctrl-c-twice")
    time.sleep(max(0.0, pressed + 2 * REPEAT_WINDOW - time.monotonic()))  # a person presses again, not a program
    twice.worker.ctrl_c()
    assert twice.worker.wait(timeout=10) == 128 + signal.SIGINT
    assert twice.events("done") == []

    for scenario in scenarios.values():
        (scenario.folder / "gate").touch()
    for scenario in scenarios.values():
        assert scenario.worker.wait(timeout=30) == 0, f"{scenario.name}:\n{scenario.worker.log_path.read_text()}"
        assert scenario.events("done") == scenario.events("start"), scenario.name
        assert scenario.queued() == 0, f"{scenario.name}: the finished message was not deleted"
        assert not [line for line in scenario.worker.lines() if line.get("event", "").startswith("second signal")]


def _both(senders: list[str]) -> list[str] | None:
    return senders if len(senders) >= 2 else None


#: Who sends the stop signal first, who sends its copy once the host has stopped, which signal, and where the
#: worker process holds its exit meanwhile (tests/apps/held_exit.py); a copy must not change how the process ends.
LATE_COPIES = {
    # coreutils' timeout, descheduled between signalling the command and its group: the supervisor passes the
    # signal on, the idle host drains in milliseconds, and the group's copy reaches the worker process after.
    "the direct copy late": ("supervisor", "host", signal.SIGTERM, "atexit"),
    # A person's Ctrl-C reaches the worker process first; the supervisor's copy follows once the host has stopped.
    "the supervisor's copy late": ("host", "supervisor", signal.SIGINT, "atexit"),
    # As late as can be: the interpreter has put back the signals' defaults.
    "the direct copy in the interpreter's last steps": ("supervisor", "host", signal.SIGINT, "finalization"),
    # The same sender again, later than a repeat: a second signal, which still exits at once.
    "a second signal from the same sender": ("host", "host", signal.SIGTERM, "atexit"),
}


@pytest.mark.parametrize("case", list(LATE_COPIES))
def test_a_stop_signal_after_the_host_stopped_does_not_end_its_process_unless_it_is_a_second(
    tmp_path: Path, case: str
) -> None:
    first, late, signum, hold_at = LATE_COPIES[case]
    held, gate = tmp_path / "held", tmp_path / "gate"
    worker = WorkerProcess(
        write_host_yaml(tmp_path),
        {"HELD_FILE": str(held), "GATE_FILE": str(gate), "HOLD_AT": hold_at},
        app="tests.apps.held_exit:app",
        own_session=True,
    ).start()
    try:
        worker.wait_for_log("host started")
        pids = {"supervisor": worker.pid, "host": worker.host_pid}
        sent = time.monotonic()
        os.kill(pids[first], signum)
        poll(held.exists, 30, what="the host to stop and its process to hold its exit")
        time.sleep(max(0.0, sent + 2 * REPEAT_WINDOW - time.monotonic()))  # later than a repeat of the first
        os.kill(pids[late], signum)
        if first == late:
            assert worker.wait(timeout=10) == 128 + signum
            return
        gate.touch()
        assert worker.wait(timeout=30) == 0, worker.log_path.read_text()
        [exited] = [line for line in worker.lines() if line.get("event") == "worker process exited"]
        assert exited["exit_code"] == 0
        assert "Traceback" not in worker.log_path.read_text()
    finally:
        gate.touch()
        worker.kill()
