"""The web console's screenshots, taken at build time by headless Chromium from a worker that runs for the purpose.

The hook starts ``worker run`` (this interpreter, ``-m worker``) on a small app in a scratch folder with its
endpoints on loopback, puts messages on its queues (one of them for a function that fails and poisons them),
opens the console in Debian's Chromium through its chromedriver (Selenium, the ``browser`` extra), waits until the
page shows what was handled, and saves the functions view and the poison view as ``images/console-*.png`` in the
built site. Nothing of it is committed.

Chromium, its driver and Selenium (the ``docs`` extra has it) are looked for: when one is missing, the build goes on
without the screenshots and says so in one line (each image is then a one-pixel placeholder), so that a writer with
only the ``docs`` extra builds the site. ``DOCS_SCREENSHOTS=0`` builds without them (the suite's build of the whole
site does so, and a test of its own runs this hook: tests/docs/test_site.py); ``DOCS_SCREENSHOTS=1`` makes a missing
browser an error.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ENV = "DOCS_SCREENSHOTS"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = {"images/console-functions.png": "#functions", "images/console-poison.png": "#poison"}
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
    "--hide-scrollbars",
)
REPO = Path(__file__).resolve().parents[2]
INSTALL = "apt-get install -y chromium chromium-driver"
log = logging.getLogger("mkdocs.plugins.screenshots")
#: The endpoints' token of the worker the hook runs, entered in the page's Token field as an operator would.
TOKEN = "docs-screenshot-token"

APP = """
import time

from worker import Poison, QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="images")
def resize(msg: QueueMessage) -> None:
    time.sleep(0.05)


@app.queue_trigger(arg_name="msg", queue_name="reports")
def report(msg: QueueMessage) -> None:
    time.sleep(float(msg.get_body().decode()))


@app.queue_trigger(arg_name="msg", queue_name="orders")
def ingest(msg: QueueMessage) -> None:
    raise Poison("order " + msg.get_body().decode() + " names no customer")
"""


def enabled() -> bool:
    return os.environ.get(ENV, "") != "0"


def missing() -> tuple[list[str], list[str]]:
    """What taking the screenshots needs and this machine lacks, and the commands that install it."""
    lacking = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    commands = [INSTALL] if lacking else []
    if importlib.util.find_spec("selenium") is None:
        lacking.append("Selenium")
        commands.append("pip install -e '.[docs]'")
    return lacking, commands


def on_files(files: Files, config: MkDocsConfig) -> Files:
    if not enabled():
        shots = {name: placeholder() for name in SHOTS}
    elif missing()[0] and os.environ.get(ENV) != "1":
        lacking, commands = missing()
        log.info(
            "console screenshots skipped, the images are placeholders: %s missing (to take them: %s)",
            ", ".join(lacking),
            "; ".join(commands),
        )
        shots = {name: placeholder() for name in SHOTS}
    else:
        shots = take()
    for name, content in shots.items():
        files.append(File.generated(config, name, content=content))
    return files


def placeholder() -> bytes:
    """A valid one-pixel PNG, for builds without screenshots."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff"))
        + chunk(b"IEND", b"")
    )


def poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if found := check():
            return found
        if time.monotonic() > deadline:
            raise PluginError(f"console screenshots: no {what} within {timeout:g} s")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextmanager
def running_worker(folder: Path) -> Iterator[int]:
    """``worker run`` on the sample app in ``folder``, until it is ready; its port."""
    port = free_port()
    (folder / "function_app.py").write_text(APP, encoding="utf-8")
    (folder / "host.yaml").write_text(
        f"worker:\n  httpPort: {port}\n  httpHost: 127.0.0.1\n  drainTimeout: 1s\n"
        "functions:\n  ingest:\n    maxDequeueCount: 1\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs", "FUNCTIONS_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["WORKER_HTTP_TOKEN"] = TOKEN  # so that the poison view shows its actions as an operator sees them
    with (folder / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        poll(lambda: proc.poll() is not None or answers(f"http://127.0.0.1:{port}/readyz"), 60, "ready worker")
        if proc.poll() is not None:
            raise PluginError(
                f"console screenshots: worker run exited {proc.returncode}: "
                f"{(folder / 'worker.log').read_text(errors='replace')[-2000:]}"
            )
        yield port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def send(folder: Path, queue: str, *bodies: str) -> None:
    from worker.backends.registry import open_backend
    from worker.bindings.encoding import encode

    async def put() -> None:
        backend = open_backend(None, folder)
        try:
            await backend.create_queue(queue)
            for body in bodies:
                await backend.put(queue, encode(body, "base64"))
        finally:
            await backend.close()

    asyncio.run(put())


def take() -> dict[str, bytes]:
    lacking, commands = missing()
    if lacking:
        raise PluginError(
            f"console screenshots need Chromium, its driver and Selenium ({', '.join(lacking)} "
            f"missing): {'; '.join(commands)}, or build with {ENV}=0"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    folder = Path(tempfile.mkdtemp(prefix="docs-console-"))
    profile = Path(tempfile.mkdtemp(prefix="docs-chromium-"))
    try:
        with running_worker(folder) as port:
            send(folder, "images", *(f"photo-{n}.jpg" for n in range(40)))
            send(folder, "reports", "30", "30")
            send(folder, "orders", "1041", "1042")
            options = webdriver.ChromeOptions()
            options.binary_location = str(CHROMIUM)
            for flag in (*FLAGS, f"--user-data-dir={profile}"):
                options.add_argument(flag)
            driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
            try:
                driver.get(f"http://127.0.0.1:{port}/")
                poll(lambda: driver.find_elements("css selector", "#token"), 30, "token field")
                driver.find_element("css selector", "#token").send_keys(TOKEN)
                driver.find_element("css selector", "#token-form button").click()

                def shown(selector: str, text: str) -> bool:
                    return any(text in element.text for element in driver.find_elements("css selector", selector))

                poll(
                    lambda: shown('article[data-function="resize"] [data-field="totals"]', "40 · 40"),
                    60,
                    "40 handled images on the page",
                )
                poll(lambda: shown("#lease-table", "report"), 30, "report's leases on the page")
                poll(lambda: shown("#poison-cards", "1042"), 30, "poisoned orders on the page")
                shots = {}
                for name, selector in SHOTS.items():
                    element = driver.find_element("css selector", selector)
                    driver.execute_script("arguments[0].scrollIntoView()", element)
                    shots[name] = element.screenshot_as_png
                return shots
            finally:
                driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
