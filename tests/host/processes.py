"""Real worker processes for the tests: start ``worker run`` with a host.yaml, signal it, read its log."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import termios
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import poll

REPO = Path(__file__).resolve().parents[2]
APP = "tests.apps.recording:app"


def write_host_yaml(folder: Path, queues: dict[str, Any] | None = None, worker: dict[str, Any] | None = None) -> Path:
    """A host.yaml in ``folder`` with fast polling, plus the given settings."""
    config = {
        "version": "1.0",
        "extensions": {"queues": {"maxPollingInterval": "200ms", **(queues or {})}},
        "worker": worker or {},
    }
    path = folder / "host.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def worker_environment(**extra: str) -> dict[str, str]:
    """This process's environment for a ``worker`` command a test starts: the repository importable, and nothing
    that could point it at other storage or settings (the app folder's files must supply those)."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WORKER__", "AzureWebJobs", "FUNCTIONS_", "PYTHON_SCRIPT_FILE_NAME"))
    }
    return kept | {"PYTHONPATH": str(REPO)} | extra


@dataclass
class WorkerProcess:
    """One ``worker run`` subprocess; its stderr (JSON log lines) goes to a file."""

    config: Path
    env: dict[str, str]
    name: str = "worker"
    app: str = APP
    #: More arguments of ``worker run`` (``--processes 2``).
    args: tuple[str, ...] = ()
    #: A command prefix the worker runs under (a mount namespace that shows it a pod's files, say).
    wrapper: tuple[str, ...] = ()
    #: Run in a session (and process group) of its own, as a service manager or a terminal starts it.
    own_session: bool = False
    #: Also on a terminal of its own (a pseudo-terminal, its controlling one), so that :meth:`ctrl_c` is a real
    #: Ctrl-C: the terminal signals its foreground process group. Implies ``own_session``.
    terminal: bool = False
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)
    _terminal_fd: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log_path = self.config.parent / f"{self.name}.log"

    def merged_env(self) -> dict[str, str]:
        """The worker's environment: this one without storage and WORKER__ settings, plus the test's."""
        inherited = {k: v for k, v in os.environ.items() if k != "AzureWebJobsStorage" and not k.startswith("WORKER__")}
        return {**inherited, "PYTHONPATH": str(REPO), **self.env}

    def start(self) -> WorkerProcess:
        env = self.merged_env()
        stdin: int | None = None
        if self.terminal:
            self._terminal_fd, stdin = os.openpty()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    *self.wrapper,
                    sys.executable,
                    "-m",
                    "worker",
                    "run",
                    "--app",
                    self.app,
                    "--config",
                    str(self.config),
                    *self.args,
                ],
                cwd=REPO,
                env=env,
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=self.own_session or self.terminal,
                preexec_fn=_take_terminal if self.terminal else None,  # runs after setsid, in the child
            )
        if stdin is not None:
            os.close(stdin)
        return self

    def ctrl_c(self) -> None:
        """Press Ctrl-C on the worker's terminal."""
        assert self._terminal_fd is not None, "started without a terminal"
        os.write(self._terminal_fd, b"\x03")

    @property
    def pid(self) -> int:
        """The pid of ``worker run`` itself: the supervisor of the process that runs the host."""
        assert self.proc is not None
        return self.proc.pid

    @property
    def host_pid(self) -> int:
        """The pid of the process running the host (its latest, after a recycle), from its "host started" line."""
        started = [line for line in self.lines() if line.get("event") == "host started"]
        assert started, f"{self.name} has not started a host:\n{self.log_path.read_text()}"
        return int(started[-1]["pid"])

    def lines(self) -> list[dict[str, Any]]:
        """Every JSON log line written so far (a half-written last line is skipped)."""
        found = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found

    def wait_for_log(self, event: str, timeout: float = 30) -> dict[str, Any]:
        def seen() -> dict[str, Any] | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            return next((line for line in self.lines() if line.get("event") == event), None)

        return poll(seen, timeout, what=f"{self.name} to log {event!r}")

    def wait_for_events(self, event: str, count: int, timeout: float) -> list[dict[str, Any]]:
        """The first ``count`` lines logging ``event``, once there are that many; on timeout, fail with the log's
        end (a worker process that never started says why only there)."""

        def enough() -> list[dict[str, Any]] | None:
            found = [line for line in self.lines() if line.get("event") == event]
            return found[:count] if len(found) >= count else None

        try:
            return poll(enough, timeout, what=f"{count} x {event!r} from {self.name}")
        except AssertionError as exc:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
            raise AssertionError(f"{exc}; its log ends:\n{tail}") from None

    def send_signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signal the worker and wait for it to exit; returns the exit code."""
        self.send_signal(signum)
        return self.wait(timeout)

    def totals(self) -> dict[str, Any]:
        """The counters of the final 'host stopped' line."""
        stopped = [line for line in self.lines() if line.get("event") == "host stopped"]
        assert stopped, f"{self.name} logged no 'host stopped' line:\n{self.log_path.read_text()}"
        return stopped[-1]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._terminal_fd is not None:
            os.close(self._terminal_fd)
            self._terminal_fd = None


def _take_terminal() -> None:
    """In the new session's leader, before exec: make standard input (the pseudo-terminal) its controlling
    terminal, whose foreground process group is then the worker's."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def attempts(record_db: Path) -> list[dict[str, Any]]:
    """The rows the recording app wrote, oldest first."""
    if not record_db.exists():
        return []
    with sqlite3.connect(record_db, timeout=30) as db:
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute("SELECT * FROM attempts ORDER BY at")]
        except sqlite3.OperationalError:  # table not created yet
            return []
