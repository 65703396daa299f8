"""The worker's HTTP endpoints for operators: liveness, readiness, Prometheus metrics, and the leases it holds.

``/healthz``  200 while the event loop answers (a blocked loop fails the probe); 503 once every handler
              thread is held by a handler the host gave up on (past functionTimeout), which only a restart
              frees: Functions recycles its worker process in that case, and a liveness probe does so here.
``/readyz``   200 when storage answers, functions are loaded and the host is not draining; else 503 with why.
``/metrics``  Prometheus text: counters, handler and poll-latency histograms, in-flight and queue-length gauges.
``/leases``   JSON: every message this worker holds invisible, with function, queue, id, dequeue count,
              lease expiry and elapsed time. Azure Storage Queues cannot list invisible messages; the worker
              can list its own.

It runs on the host's event loop (aiohttp), and only when ``worker.httpPort`` is set.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.observability.metrics import Metrics
from worker.runtime.lease import LeaseScheduler

log = structlog.get_logger("worker.runtime.endpoints")

#: Longest a readiness check waits for storage, in seconds.
READY_TIMEOUT = 3.0


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
    ) -> None:
        """``last_storage_error`` says why storage last failed, for a readiness check that gets no answer in time."""
        self.last_storage_error = last_storage_error
        self.metrics = metrics
        self.stuck = stuck
        self.scheduler = scheduler
        self.storage_check = storage_check
        self.functions = functions
        self.draining = draining
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, host: str = "0.0.0.0") -> None:
        app = web.Application()
        app.add_routes([
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.metrics_text),
            web.get("/leases", self.leases),
        ])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        log.info("endpoints listening", port=port, paths=["/healthz", "/readyz", "/metrics", "/leases"])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def healthz(self, _: web.Request) -> web.Response:
        if (problem := self.stuck()) is not None:
            return web.json_response({"status": "stuck", "problem": problem}, status=503)
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        problems = []
        if not self.functions:
            problems.append("no functions loaded")
        if self.draining():
            problems.append("draining")
        if (stuck := self.stuck()) is not None:
            problems.append(stuck)
        try:
            async with asyncio.timeout(READY_TIMEOUT):  # not wait_for: see worker/waits.py
                await self.storage_check()
        except TimeoutError:
            last = self.last_storage_error()
            problem = f"storage unreachable: no answer within {READY_TIMEOUT:g}s"
            problems.append(f"{problem}; last: {last}" if last else problem)
        except Exception as exc:  # a TransientError names the endpoint and the cause (refused, sign-in, TLS ...)
            problems.append(f"storage unreachable: {exc}" if str(exc) else f"storage unreachable: {type(exc).__name__}")
        body = {"ready": not problems, "problems": problems, "functions": self.functions}
        return web.json_response(body, status=200 if not problems else 503)

    async def metrics_text(self, _: web.Request) -> web.Response:
        output = await asyncio.to_thread(generate_latest, self.metrics.registry)
        return web.Response(body=output, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def leases(self, _: web.Request) -> web.Response:
        now = time.monotonic()
        wall = datetime.now(UTC)
        held = sorted(self.scheduler.held, key=lambda lease: lease.acquired_at)
        return web.json_response([
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
        ])
