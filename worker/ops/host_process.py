"""The process that runs the host: ``worker run --no-supervisor``, which the supervisor starts for each process.

It loads the app with every start-up check; what cannot run is refused, every problem listed (exit 2).
It tells the supervisor the app loaded, runs the host, prints its summary, and exits.
Exit: 0, :data:`RECYCLED` after a sync handler passed functionTimeout, or :data:`FAULT` when a host task failed.
A module of its own: only this process loads the app and the host, never the supervisor.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from worker.backends.embedded.files import Exposed
from worker.compat.loading import load_app
from worker.observability.metrics import format_summary
from worker.ops import preflight
from worker.ops.supervisor import APP_LOADED_SIGNAL, PROCESS_INDEX_ENV, wait_for_the_first_process
from worker.runtime.console.state import StartFacts
from worker.runtime.faults import FAULT
from worker.runtime.handover import HANDOVER_ENV, RECYCLED
from worker.runtime.host import Host
from worker.runtime.inflight import INFLIGHT_ENV
from worker.settings.config import HostConfig
from worker.settings.local_settings import LocalSettings


def _looked_in(local: LocalSettings, config: HostConfig) -> str:
    """Every place a setting may come from, for a connection found in none of them."""
    settings_file = f"{config.source} (connections:)" if config.source else "no host.yaml or host.json"
    return f"looked in: the environment, {local.describe()}, {settings_file}"


def _warn_exposed(log: Any, event: str, found: Exposed) -> None:
    """Say at start that a file or folder of the worker's is open to other users, and how to close it."""
    log.warning(event, path=str(found.path), mode=f"{found.mode:04o}", access=found.who, fix=found.fix)


def run_here(args: argparse.Namespace, config: HostConfig, log: Any, supervisor_pid: str | None) -> int:
    """Run ``args.app`` on ``config`` in this process; ``supervisor_pid`` is the supervisor's, if one started it."""
    if not wait_for_the_first_process(os.environ):  # the supervisor stopped before the first process loaded the app
        return 0
    looked_in = _looked_in(args.local_settings, config)
    # Every start-up check runs here, once, before anything is built: what cannot run is refused with every
    # problem listed (exit 2).
    app = load_app(
        args.app,
        config.base_dir,
        connection_problem=partial(preflight.connection_problem, config, looked_in=looked_in),
        check=lambda app: preflight.problems(app, config, looked_in=looked_in),
        found=preflight.environment_problems(os.environ),
    )
    if os.environ.get(PROCESS_INDEX_ENV, "0") == "0":  # the first process (or the only one) says it for all
        for found in preflight.exposed_files(app, config):
            _warn_exposed(log, "embedded queue or blob storage open to other users", found)
        local = args.local_settings.path if args.local_settings.found else None
        for found in preflight.exposed_secret_files(config, local):
            _warn_exposed(log, "settings or token file open to other users", found)
        if supervisor_pid is not None:  # the app can run: the supervisor starts the other processes now
            os.kill(int(supervisor_pid), APP_LOADED_SIGNAL)
    handover, in_flight = os.environ.get(HANDOVER_ENV), os.environ.get(INFLIGHT_ENV)
    facts = StartFacts(args.app, str(args.local_settings.path) if args.local_settings.found else None)
    host = Host(
        app,
        config,
        burst=args.burst,
        handover=Path(handover) if handover else None,
        in_flight=Path(in_flight) if in_flight else None,
        facts=facts,
        own_process=True,
    )
    # What start-up made (the modules, the app, the settings: tens of thousands of objects) lives as long as the
    # process. Frozen, the collector no longer walks it at every full collection, which the objects of the messages
    # in flight trigger every few hundred messages: 30-85 ms each, a tenth of a no-op message's CPU. Here and not in
    # Host.run, which tests run in their own process among other hosts.
    gc.freeze()
    try:
        dispatcher = asyncio.run(host.run())
    finally:  # what the interpreter's last steps finalize (an app's objects' __del__) must be collectable again
        gc.unfreeze()
    try:
        print(format_summary(host.metrics, host.elapsed), flush=True)
    except OSError:  # stdout closed or its reader gone: the summary is lost, the exit code must not be
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- what the interpreter flushes at exit, instead
    if host.gave_up is not None:  # said in one line when it gave up
        return FAULT
    if host.faults.failed:  # said with its traceback when it happened; the exit is for whatever restarts the process
        log.error("the host stopped because a task of its own failed", failed=host.faults.failed, exit_code=FAULT)
        return FAULT
    if host.recycled is not None:
        # The timed-out handler's thread still runs: only the end of the process stops it.
        log.warning("process recycled", reason=host.recycled, exit_code=RECYCLED)
        sys.stderr.flush()
        os._exit(RECYCLED)
    if dispatcher.threads.busy:
        # A sync handler past drainTimeout cannot be stopped from outside; its message is already released.
        sys.stderr.flush()
        os._exit(0)
    return 0
