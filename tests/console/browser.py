"""A real browser for the console's tests: Debian's Chromium, headless, driven by Selenium through Debian's
chromedriver (given explicitly, so that Selenium never tries to download one).

A machine without them fails the test with the command that installs them: nothing is skipped.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get update && apt-get install -y chromium chromium-driver"
#: Where screenshots go: gitignored, at the repository's root, kept after the run.
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
#: Headless, and nothing that reaches out to the network on its own (this machine's closed network refuses it,
#: and Chromium then stalls or logs errors).
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
)


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile, its console messages kept for ``get_log("browser")``."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(
            f"the console's browser tests need Chromium and its driver ({', '.join(missing)} missing); "
            f"install them with: {INSTALL}",
            pytrace=False,
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the console's browser tests need Selenium: pip install -e '.[browser]'", pytrace=False)
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def artifact(name: str) -> Path:
    """Where screenshot ``name`` goes (said on the test's output)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    print(f"screenshot: {path}")
    return path


def screenshot(driver: WebDriver, selector: str, name: str) -> Path:
    """Save the element ``selector`` as ``ARTIFACTS/name.png``."""
    path = artifact(name)
    element = driver.find_element("css selector", selector)
    driver.execute_script("arguments[0].scrollIntoView()", element)
    element.screenshot(str(path))
    return path
