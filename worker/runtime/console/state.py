"""The console's views as JSON, from the host's own parts: nothing here asks storage but :meth:`Console.refresh`."""

from __future__ import annotations

import asyncio
import heapq
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from worker.backends.queues import CountsByVisibility, QueueBackend
from worker.model import FunctionSpec, Lease
from worker.observability.metrics import Metrics
from worker.runtime.console.actions import BulkActions
from worker.runtime.console.history import COUNTERS, INTERVAL, History
from worker.runtime.console.poison import PoisonOf
from worker.runtime.console.recorder import ConsoleRecorder, percentile
from worker.runtime.lease import LeaseScheduler
from worker.settings.config import FunctionOptions, HostConfig

log = structlog.get_logger("worker.runtime.console")

#: Longest a look at storage (depths, poison, readiness) is reused for, in seconds: a page polled by any number
#: of people costs storage at most this often.
LOOK_TTL = 3.0
#: Longest the look waits for one queue's answer, in seconds.
LOOK_TIMEOUT = 3.0
#: Leases listed, oldest first (the total is always given).
LEASES_SHOWN = 200


@dataclass(frozen=True)
class StartFacts:
    """What ``worker run`` knows at start that the host does not: the app it was asked for and the local settings."""

    app: str = ""
    local_settings: str | None = None


@dataclass
class Watched:
    """One function the console shows, with what it runs on."""

    spec: FunctionSpec
    options: FunctionOptions
    backend: QueueBackend
    #: The storage as the logs name it (no secret in it).
    storage: str
    #: Its settings that differ from the global ones.
    own: dict[str, object] = field(default_factory=dict)


@dataclass
class HostParts:
    """What the console reads of the running host, handed in by it."""

    metrics: Metrics
    scheduler: LeaseScheduler
    config: HostConfig
    #: Invocations and messages held now, per function.
    running: Callable[[], dict[str, tuple[int, int]]]
    #: Why the host is not ready (the problems ``/readyz`` lists); empty when it is.
    readiness: Callable[[], Awaitable[list[str]]]
    #: The work tags (Spark job tags) of each invocation held that has any, by invocation id.
    work_tags: Callable[[], dict[str, list[str]]]
    #: Functions of the app this host does not run, with why.
    not_run: tuple[str, ...] = ()


class Console:
    """Builds the views; keeps the history ring fed (:meth:`sample_forever`) and a cached look at storage."""

    def __init__(
        self, functions: list[Watched], parts: HostParts, recorder: ConsoleRecorder, facts: StartFacts, *, actions: bool
    ) -> None:
        """``actions``: whether poison actions are possible (a token is set)."""
        self.functions = {w.spec.name: w for w in functions}
        self.parts = parts
        self.recorder = recorder
        self.facts = facts
        self.actions = actions
        self.history = History(list(self.functions))
        self.poison = {
            name: PoisonOf(name, w.spec.queue_name, w.backend, parts.config.message_encoding)
            for name, w in self.functions.items()
        }
        #: Requeue all and purge, run beside the requests that start them.
        self.bulk = BulkActions(lambda: self.refresh(0))
        self.started = time.time()
        self._looked_at = -LOOK_TTL
        self._look: dict[str, Any] = {"depths": {}, "poison": {}, "problems": []}
        self._taken = False
        self._looking = asyncio.Lock()
        #: The look being taken for a view that did not wait for it.
        self._behind: asyncio.Task[dict[str, Any]] | None = None

    # -- storage, cached ------------------------------------------------------------------------------------

    async def refresh(self, max_age: float = LOOK_TTL) -> dict[str, Any]:
        """The last look at storage, taken again first when older than ``max_age`` seconds (one look at a time)."""
        async with self._looking:
            if time.monotonic() - self._looked_at >= max_age:
                self._look = await self._take_look()
                self._looked_at = time.monotonic()
                self._taken = True
            return self._look

    async def current_look(self) -> dict[str, Any]:
        """The last look at storage, at once: one older than :data:`LOOK_TTL` is taken again behind the answer,
        so that no view waits for storage (but the first, which has nothing to show before)."""
        if not self._taken:
            return await self.refresh()
        if time.monotonic() - self._looked_at >= LOOK_TTL and (self._behind is None or self._behind.done()):
            self._behind = asyncio.create_task(self.refresh(), name="console-look")
        return self._look

    def stop(self) -> None:
        """Cancel a look still being taken and the poison actions still running (the host is stopping)."""
        if self._behind is not None:
            self._behind.cancel()
        self.bulk.stop()

    async def _take_look(self) -> dict[str, Any]:
        """Each trigger queue's depth, each function's poison and the readiness problems, asked at once; storage
        that does not answer within :data:`LOOK_TIMEOUT` is shown as such (a backend's retries can take minutes)."""

        async def depth(w: Watched) -> dict[str, Any]:
            try:
                async with asyncio.timeout(LOOK_TIMEOUT):
                    if isinstance(w.backend, CountsByVisibility):
                        counts = await w.backend.message_counts(w.spec.queue_name)
                        return {
                            "total": counts.visible + counts.invisible,
                            "visible": counts.visible,
                            "invisible": counts.invisible,
                        }
                    return {
                        "total": await w.backend.approximate_count(w.spec.queue_name),
                        "visible": None,
                        "invisible": None,
                    }
            except Exception as exc:  # shown with the function; readiness says it too
                return {"total": None, "error": _why(exc)}

        async def poison(of: PoisonOf) -> dict[str, Any]:
            try:
                async with asyncio.timeout(LOOK_TIMEOUT):
                    return await of.look()
            except Exception as exc:
                return {"function": of.function, "queue": of.queue, "error": _why(exc)}

        names = list(self.functions)
        depths = await asyncio.gather(*(depth(self.functions[name]) for name in names))
        poisons = await asyncio.gather(*(poison(self.poison[name]) for name in names))
        problems = await self.parts.readiness()
        return {
            "depths": dict(zip(names, depths, strict=True)),
            "poison": dict(zip(names, poisons, strict=True)),
            "problems": problems,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    # -- views ----------------------------------------------------------------------------------------------

    async def state(self) -> dict[str, Any]:
        """Every view but the history: functions, leases, failures, poison, start-up facts."""
        look = await self.current_look()
        now = time.time()
        counts = self.parts.metrics.by_function()
        running = self.parts.running()
        max_in_flight = self.parts.config.max_in_flight
        functions = []
        for name, w in self.functions.items():
            totals = {key: counts.get(name, {}).get(key, 0) for key in COUNTERS}
            invocations, held = running.get(name, (0, 0))
            limit = w.options.max_concurrency
            functions.append(
                {
                    "name": name,
                    "queue": w.spec.queue_name,
                    "storage": w.storage,
                    "handler": "async" if w.spec.is_async else "sync",
                    "depth": look["depths"].get(name, {"total": None}),
                    "held": held,
                    "concurrency": {
                        "inUse": invocations,
                        "limit": limit if limit is not None else max_in_flight,
                        "limitFrom": "maxConcurrency" if limit is not None else "maxInFlight (shared)",
                    },
                    "rates": self.history.rates(name, now, totals),
                    "totals": totals,
                    "times": self.recorder.percentiles(name),
                    "own": {k: str(v) for k, v in w.own.items()},
                }
            )
        return {
            "functions": functions,
            "leases": self.leases(),
            "failures": list(self.recorder.failures),
            "poison": [look["poison"][name] for name in self.functions if name in look["poison"]],
            "poisonActions": self.bulk.views(),
            "facts": self.start_facts(look["problems"]),
            "lookedAt": look.get("at"),
        }

    def leases(self, limit: int = LEASES_SHOWN) -> dict[str, Any]:
        """The ``limit`` oldest leases held (a long one stands out: ``long`` once it outlived its own duration)."""
        held = self.parts.scheduler.held
        oldest = heapq.nsmallest(limit, held, key=lambda lease: lease.acquired_at)
        now = time.monotonic()
        tags = self.parts.work_tags()
        return {"total": len(held), "limit": limit, "shown": [self._lease(lease, now, tags) for lease in oldest]}

    def _lease(self, lease: Lease, now: float, tags: dict[str, list[str]]) -> dict[str, Any]:
        age = now - lease.acquired_at
        duration = lease.duration or self.parts.scheduler.duration
        return {
            "function": lease.function,
            "queue": lease.queue,
            "messageId": lease.message_id,
            "invocationId": lease.invocation_id,
            "dequeueCount": lease.dequeue_count,
            "ageSeconds": round(age, 1),
            "renewals": lease.renewals,
            "nextRenewalSeconds": round(max(0.0, lease.due - now), 1),
            "expiresInSeconds": round(lease.expires_at - now, 1),
            "sparkTags": tags.get(lease.invocation_id, []) if lease.invocation_id else [],
            "long": age > duration,
        }

    def start_facts(self, problems: list[str]) -> dict[str, Any]:
        config = self.parts.config
        return {
            "app": self.facts.app,
            "settingsFile": str(config.source) if config.source else None,
            "localSettings": self.facts.local_settings,
            "pid": os.getpid(),
            "startedAt": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "settings": config.differences(),
            "notRun": list(self.parts.not_run),
            "ready": not problems,
            "problems": problems,
            "actions": self.actions,
            "processes": 1,
        }

    # -- history --------------------------------------------------------------------------------------------

    def sample(self, at: float) -> None:
        """Add one sample per function at ``at`` (wall clock) from the counters and the last look at storage."""
        counts = self.parts.metrics.by_function()
        running = self.parts.running()
        depths = self._look["depths"] if time.monotonic() - self._looked_at < 2 * INTERVAL else {}
        for name in self.functions:
            window = self.recorder.times_of(name).take_window()
            p50, p95 = percentile(window, 0.5), percentile(window, 0.95)
            self.history.add(
                name,
                at,
                {
                    "depth": depths.get(name, {}).get("total"),
                    "inFlight": running.get(name, (0, 0))[1],
                    **{key: counts.get(name, {}).get(key, 0) for key in COUNTERS},
                    "p50": None if p50 is None else p50 * 1000,
                    "p95": None if p95 is None else p95 * 1000,
                },
            )

    async def sample_forever(self) -> None:
        """One sample now (so that rates have a base from the start), then one on every multiple of
        :data:`INTERVAL` seconds; until cancelled."""
        self.sample(time.time())
        try:
            while True:
                now = time.time()
                boundary = (now // INTERVAL + 1) * INTERVAL
                await asyncio.sleep(boundary - now)
                try:
                    await self.refresh(INTERVAL / 2)
                except Exception as exc:  # the look keeps its errors per queue; readiness trouble shows on the page
                    log.debug("console look at storage failed", error=f"{type(exc).__name__}: {exc}")
                self.sample(boundary)
        finally:
            self.stop()


def _why(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {LOOK_TIMEOUT:g}s"
    return f"{type(exc).__name__}: {exc}"
