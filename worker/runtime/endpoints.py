"""The worker's HTTP endpoints for operators: liveness, readiness, Prometheus metrics, and the leases it holds.

``/healthz``, ``/readyz``, ``/metrics``, ``/leases``, and the console at ``/``: docs/operating.md.
``/healthz`` fails once every handler thread is held past functionTimeout, as Functions would recycle.
They run on the host's loop (aiohttp), only with ``worker.httpPort`` set.
Access is :mod:`worker.runtime.guard`'s; connection limits are :mod:`worker.runtime.connections`'.
``/readyz`` asks storage at most once per :data:`STORAGE_CHECK_TTL`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.model import StartupRefused
from worker.observability.metrics import Metrics
from worker.observability.redaction import redact
from worker.runtime.connections import ConnectionLimits, Gate, GatedSite
from worker.runtime.console.state import Console
from worker.runtime.console.web import routes
from worker.runtime.guard import CONSOLE_ELSEWHERE_ENV, Access, TokenFailures, announce, announce_console, application
from worker.runtime.lease import LeaseScheduler

log = structlog.get_logger("worker.runtime.endpoints")

#: Longest a readiness check waits for storage, in seconds.
READY_TIMEOUT = 3.0
#: How long an answer of storage to a readiness check stands for the next ones, in seconds.
STORAGE_CHECK_TTL = 3.0


async def listen(runner: web.AppRunner, host: str, port: int, gate: Gate) -> None:
    """Serve ``runner`` on ``host:port`` through ``gate`` (whose middleware the runner's application must have); a port
    that cannot be had refuses the start with one line naming it."""
    try:
        await GatedSite(runner, host, port, gate).start()
    except OSError as exc:
        await runner.cleanup()
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise CannotListen(f"cannot listen on {address}: {reason}") from None


class CannotListen(StartupRefused):
    """The endpoints' address is taken or not this machine's: restarting cannot help (exit 2)."""

    def __init__(self, problem: str) -> None:
        super().__init__([problem])

    def __str__(self) -> str:
        return self.problems[0]


class Endpoints:
    """Serves the four endpoints from what the host hands it."""

    def __init__(
        self,
        metrics: Metrics,
        scheduler: LeaseScheduler,
        storage_check: Callable[[], Awaitable[None]],
        functions: list[str],
        draining: Callable[[], bool],
        stuck: Callable[[], str | None],
        last_storage_error: Callable[[], str | None] = lambda: None,
        held_back: Callable[[], list[str]] = list,
        not_ready: Callable[[], list[str]] = list,
    ) -> None:
        """``last_storage_error`` says why storage last failed, for a readiness check that gets no answer in time;
        ``held_back`` why receives are held back (completions failing on storage), one line per storage;
        ``not_ready`` what the middleware says keeps the host from being ready (Spark starting, or why it did not)."""
        self.not_ready = not_ready
        self.last_storage_error = last_storage_error
        self.held_back = held_back
        self.metrics = metrics
        self.stuck = stuck
        self.scheduler = scheduler
        self.storage_check = storage_check
        self.functions = functions
        self.draining = draining
        self._runner: web.AppRunner | None = None
        self._failures = TokenFailures()
        self._storage_checking = asyncio.Lock()
        self._storage_checked_at = -STORAGE_CHECK_TTL
        self._storage_problem: str | None = None

    async def start(
        self, port: int, access: Access, console: Console | None = None, limits: ConnectionLimits | None = None
    ) -> None:
        """Listen on ``access.bind``:``port`` (with the console at ``/`` when given) within ``limits``; CannotListen
        when the address cannot be had."""
        gate = Gate(limits or ConnectionLimits())
        for collector in (gate, self._failures):
            self.metrics.registry.register(collector)
        app = application(access, gate, self._failures)
        app.add_routes(
            [
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readyz),
                web.get("/metrics", self.metrics_text),
                web.get("/leases", self.leases),
                *(routes(console) if console is not None else ()),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await listen(self._runner, access.bind, port, gate)
        announce(
            access,
            port=port,
            max_connections=gate.max_connections,
            paths=["/healthz", "/readyz", "/metrics", "/leases", *(["/"] if console is not None else [])],
        )
        if console is not None and not os.environ.get(CONSOLE_ELSEWHERE_ENV):
            announce_console(access, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._failures.log.close()

    async def healthz(self, _: web.Request) -> web.Response:
        if (problem := self.stuck()) is not None:
            return web.json_response({"status": "stuck", "problem": redact(problem)}, status=503)
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        problems = await self.readiness()
        # Open to anyone (the kubelet sends no token): storage's errors name endpoints, which may carry a password.
        body = {"ready": not problems, "problems": [redact(problem) for problem in problems], "functions": self.functions}
        return web.json_response(body, status=200 if not problems else 503)

    async def readiness(self) -> list[str]:
        """Why the host is not ready, one line each; empty when it is (storage's answer may be a few seconds old)."""
        problems = []
        if not self.functions:
            problems.append("no functions loaded")
        if self.draining():
            problems.append("draining")
        if (stuck := self.stuck()) is not None:
            problems.append(stuck)
        problems += self.held_back()
        problems += self.not_ready()
        if (storage := await self.storage_problem()) is not None:
            problems.append(storage)
        return problems

    async def storage_problem(self) -> str | None:
        """Why storage does not answer, or None when it does: asked at most once per :data:`STORAGE_CHECK_TTL` (one
        check at a time; the probes that come meanwhile take its answer)."""
        async with self._storage_checking:
            if time.monotonic() - self._storage_checked_at >= STORAGE_CHECK_TTL:
                self._storage_problem = await self._check_storage()
                self._storage_checked_at = time.monotonic()
            return self._storage_problem

    async def _check_storage(self) -> str | None:
        try:
            async with asyncio.timeout(READY_TIMEOUT):  # not wait_for: see worker/waits.py
                await self.storage_check()
        except TimeoutError:
            last = self.last_storage_error()
            problem = f"storage unreachable: no answer within {READY_TIMEOUT:g}s"
            return f"{problem}; last: {last}" if last else problem
        except Exception as exc:  # a TransientError names the endpoint and the cause (refused, sign-in, TLS ...)
            return f"storage unreachable: {exc}" if str(exc) else f"storage unreachable: {type(exc).__name__}"
        return None

    async def metrics_text(self, _: web.Request) -> web.Response:
        output = await asyncio.to_thread(generate_latest, self.metrics.registry)
        # Labels name functions, queues and storage, as the settings gave them: redacted as the log is.
        return web.Response(body=redact(output.decode()).encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def leases(self, _: web.Request) -> web.Response:
        now = time.monotonic()
        wall = datetime.now(UTC)
        held = sorted(self.scheduler.held, key=lambda lease: lease.acquired_at)
        return web.json_response(
            [
                {
                    "function": lease.function,
                    "queue": lease.queue,
                    "messageId": lease.message_id,
                    "dequeueCount": lease.dequeue_count,
                    "leaseExpires": (wall + timedelta(seconds=lease.expires_at - now)).isoformat(),
                    "elapsedSeconds": round(now - lease.acquired_at, 3),
                    "renewals": lease.renewals,
                }
                for lease in held
            ]
        )
