"""The ``worker`` command run in the test's own process, through ``main(argv)``, as a shell would run it.

A subprocess costs a Python start and the host's imports (about a second) and
shows nothing more for commands that only read arguments, files and a queue:
the exit code, stdout and stderr are the same. Tests of what only a process
shows (signals, the console script, several processes at once) start real
processes instead and carry ``@pytest.mark.subprocess``.
"""

from __future__ import annotations

import atexit
import io
import os
import signal
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import structlog

from worker.observability.logs import configure_logging
from worker.ops import cli
from worker.runtime.signals import FORWARDED, STOP_SIGNALS, ignore_stop_signals


@dataclass(frozen=True)
class Ran:
    """What a shell would see of one command: its exit code and output."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    """Run ``worker ARGS`` in ``cwd`` with ``env`` added to an environment that cannot point it elsewhere.

    The working folder, the environment, the logging set-up (which the CLI
    configures for itself) and the stop signals' handlers (which ``worker run``
    keeps reading after its host stops, and ignores at the process's exit) are
    the process's own, so each is put back after the command; the tests of
    one process run one at a time. The CLI's logging set-up is kept from
    caching loggers, so that a module's logger first used by a command does
    not keep writing to that command's captured stderr.
    """
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_signals = {signum: signal.getsignal(signum) for signum in (*STOP_SIGNALS, *FORWARDED.values())}
    for name in [n for n in os.environ if n.startswith("WORKER__") or n == "AzureWebJobsStorage"]:
        del os.environ[name]
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                with mock.patch.object(cli, "configure_logging", _configure_uncached):
                    code = cli.main(list(args))
            except SystemExit as exc:  # argparse's usage errors, as `python -m worker` would exit
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        configure_logging("INFO", json_lines=False)
        for signum, handler in saved_signals.items():
            # Only what the command changed: a command run from a thread (asyncio.to_thread) changed none, and
            # may not set any.
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        atexit.unregister(ignore_stop_signals)
    return Ran(code, out.getvalue(), err.getvalue())


def _configure_uncached(*args: object, **kwargs: object) -> None:
    configure_logging(*args, **kwargs)  # type: ignore[arg-type]
    structlog.configure(cache_logger_on_first_use=False)
