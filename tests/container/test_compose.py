"""deploy/compose.yaml as shipped, brought up and down by podman-compose (Debian's), as a user without Docker would.

The file builds its images when they are missing. Here its variables name the images the suite built from the same
Dockerfiles on the offline base image (``QUEUEWORKER_IMAGE``, ``AZURITE_IMAGE``, by id, which no other build can
move), so that ``up`` builds nothing, and publish on free ports (``WORKER_PORT``, ``AZURITE_PORT``), so that it runs
beside anything else on the machine; each run is a compose project of its own (``-p``).

What it checks: both services run those images; the worker answers ``/healthz`` and ``/readyz`` on its published
port; the compose file's health checks (shell form) pass under podman; Azurite is package-lock.json's version; a
message sent from the host through Azurite's published port runs through the worker (which reaches Azurite by its
service name) and is deleted; ``stop`` lets the worker exit 0; ``down -v`` leaves no container and no volume of the
project. podman-compose 1.0's ``down`` leaves the project's network, which this test removes itself (deploy/README.md
says so). Each phase's seconds are printed under ``pytest -s``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.error
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.azurite import ACCOUNT, KEY
from tests.container.podman import REPO, Image, Podman
from tests.deploy.support import COMPOSE, documented_stop_timeout, locked_azurite
from tests.support import free_port, get, poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.settings.config import load_config

#: Longest the worker may take to be ready: Spark's JVM starts with it, and Azurite's Node loads its modules, on two
#: busy cores.
READY_TIMEOUT = 180.0
#: podman-compose's own commands (up, stop, down) run podman once per container, network and volume.
COMPOSE_TIMEOUT = 300.0
pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(1800)]


@dataclass
class Compose:
    """``podman-compose -p PROJECT -f deploy/compose.yaml`` with the tests' containers.conf and ``variables``."""

    podman: Podman
    variables: dict[str, str]
    project: str = field(default_factory=lambda: f"queueworker-test-{uuid.uuid4().hex[:8]}")

    def run(self, *args: str, timeout: float = COMPOSE_TIMEOUT) -> str:
        """What the command wrote; a non-zero exit, or a podman command it ran failing, fails the test."""
        done = subprocess.run(
            ["podman-compose", "-p", self.project, "-f", str(COMPOSE), *args],
            env={**self.podman.env, **self.variables},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        output = done.stdout + done.stderr
        # podman-compose 1.0 goes on (and exits 0) when a podman command it runs fails: it prints the exit code.
        failed = [code for code in re.findall(r"^exit code: (\d+)$", output, re.M) if code != "0"]
        assert done.returncode == 0 and not failed, (
            f"podman-compose {' '.join(args)} exited {done.returncode}:\n{output[-6000:]}"
        )
        return output

    def container(self, service: str) -> str:
        """The container podman-compose names for the service's one replica."""
        return f"{self.project}_{service}_1"

    def owned(self, kind: str) -> list[str]:
        """The project's containers, volumes or networks (podman-compose labels each with the project's name)."""
        label = f"label=io.podman.compose.project={self.project}"
        listing = {
            "container": ["ps", "--all", "--format", "{{.Names}}"],
            "volume": ["volume", "ls", "--format", "{{.Name}}"],
            "network": ["network", "ls", "--format", "{{.Name}}"],
        }[kind]
        return self.podman.run(*listing, "--filter", label).stdout.split()

    def remove_all(self) -> None:
        """Whatever the project still has, removed (after a failure, and the network ``down`` leaves)."""
        for name in self.owned("container"):
            self.podman.run("rm", "--force", "--volumes", "--time", "0", name, check=False)
        for name in self.owned("volume"):
            self.podman.run("volume", "rm", "--force", name, check=False)
        for name in self.owned("network"):
            self.podman.run("network", "rm", "--force", name, check=False)


def status(port: int, path: str) -> int:
    """The endpoint's HTTP status, or 0 while nothing answers on the port."""
    try:
        return get(port, path, timeout=2)[0]
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def logs(compose: Compose) -> str:
    out = []
    for service in ("azurite", "worker"):
        found = compose.podman.run("logs", compose.container(service), check=False)
        out.append(f"--- log of {service}:\n{(found.stdout + found.stderr)[-4000:]}")
    return "\n".join(out)


def succeeded(port: int, function: str) -> float:
    """The worker's ``worker_succeeded_total`` for ``function`` on /metrics (0 until it has counted one)."""
    code, body = get(port, "/metrics", timeout=5)
    assert code == 200, f"/metrics answered {code}"
    found = re.search(rf'^worker_succeeded_total{{function="{function}"}} (\S+)$', body, re.M)
    return float(found.group(1)) if found else 0.0


def put_and_count(connection: str, queue: str, folder: Path, body: str | None) -> int:
    """Put ``body`` on ``queue`` (unless None), encoded as the image's host.yaml tells the worker to read it (as
    ``worker send`` puts it), then the queue's approximate count, through the worker's own Azure backend."""

    async def go() -> int:
        backend = open_backend(connection, folder)
        try:
            if body is not None:
                await backend.put(queue, encode(body, load_config(REPO / "host.yaml", environ={}).message_encoding))
            return await backend.approximate_count(queue)
        finally:
            await backend.close()

    return asyncio.run(go())


def test_compose_runs_the_worker_on_its_azurite_and_down_leaves_nothing(
    containers: Podman, image: Image, azurite_image: Image, tmp_path: Path
) -> None:
    worker_port, azurite_port = free_port(), free_port()
    compose = Compose(
        containers,
        {
            "QUEUEWORKER_IMAGE": image.id,
            "AZURITE_IMAGE": azurite_image.id,
            "WORKER_PORT": str(worker_port),
            "AZURITE_PORT": str(azurite_port),
        },
    )
    # From the host, Azurite is its published port on loopback, with the emulator's well-known account.
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"QueueEndpoint=http://127.0.0.1:{azurite_port}/{ACCOUNT};"
    )
    times: dict[str, float] = {}
    began = time.monotonic()
    try:
        output = compose.run("up", "-d")
        times["up"] = time.monotonic() - began
        assert "podman build" not in output, "up built an image the variables named"
        for service, built in (("worker", image), ("azurite", azurite_image)):
            ran = containers.run("inspect", "--format", "{{.Image}}", compose.container(service)).stdout.strip()
            assert ran == built.id, f"{service} runs {ran}, not the image the suite built ({built.id})"

        def answers(path: str) -> bool:
            if status(worker_port, path) == 200:
                return True
            running = containers.run("inspect", "--format", "{{.State.Running}}", compose.container("worker"))
            assert running.stdout.strip() == "true", f"the worker exited before {path} answered 200"
            return False

        poll(lambda: answers("/healthz"), READY_TIMEOUT, interval=0.2, what="/healthz to answer 200")
        times["healthz"] = time.monotonic() - began
        poll(lambda: answers("/readyz"), READY_TIMEOUT, interval=0.2, what="/readyz to answer 200")
        times["readyz"] = time.monotonic() - began

        # The compose file's health checks run under podman (podman-compose passes them on; systemd would time them).
        for service in ("azurite", "worker"):
            check = containers.run("healthcheck", "run", compose.container(service), check=False)
            assert check.returncode == 0, f"{service}'s health check: {check.stdout}{check.stderr}"
        installed = containers.run(
            "exec", compose.container("azurite"), "cat", "/opt/azurite/node_modules/azurite/package.json"
        ).stdout
        assert json.loads(installed)["version"] == locked_azurite(), "Azurite is not package-lock.json's"

        # One message through the published Azurite to the worker: the sample's report step, which with no daily
        # sales yet succeeds with nothing to report.
        sent = time.monotonic()
        put_and_count(connection, "report", tmp_path, json.dumps({"days": []}))
        poll(lambda: succeeded(worker_port, "report") >= 1, 120, interval=0.5, what="the worker to handle the message")
        poll(
            lambda: put_and_count(connection, "report", tmp_path, None) == 0,
            30,
            interval=0.5,
            what="the message deleted from Azurite",
        )
        times["message"] = time.monotonic() - sent

        # podman-compose 1.0 gives stop no grace of the file's (stop_grace_period): -t as deploy/README.md says.
        stopping = time.monotonic()
        compose.run("stop", "-t", str(documented_stop_timeout()), timeout=documented_stop_timeout() * 2 + 60)
        times["stop"] = time.monotonic() - stopping
        code = containers.run("inspect", "--format", "{{.State.ExitCode}}", compose.container("worker")).stdout
        assert code.strip() == "0", f"the worker exited {code.strip()} on SIGTERM"

        downing = time.monotonic()
        compose.run("down", "-v")
        times["down"] = time.monotonic() - downing
        assert compose.owned("container") == [], "down left containers"
        assert compose.owned("volume") == [], "down -v left volumes"
        assert compose.owned("network") == [f"{compose.project}_default"], (
            "podman-compose 1.0's down leaves exactly the project's network (deploy/README.md says so)"
        )
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{logs(compose)}") from failure
    finally:
        compose.remove_all()
    assert not any(compose.owned(kind) for kind in ("container", "volume", "network"))
    print(
        f"\ncompose: up {times['up']:.1f} s, /healthz at {times['healthz']:.1f} s, /readyz at {times['readyz']:.1f} s,"
        f" a message through the worker {times['message']:.1f} s, stop {times['stop']:.1f} s,"
        f" down {times['down']:.1f} s; {time.monotonic() - began:.1f} s in all"
    )
