"""The documentation site builds with every warning an error, and holds what the references promise.

The suite builds the whole site once (``mkdocs build --strict``, as ``make docs`` does) into a scratch folder, with
the console's screenshots off (``DOCS_SCREENSHOTS=0``: a worker and a Chromium for two pictures would triple the
build's time); a test of its own runs the screenshot hook, which starts a worker and drives Chromium as the build
does. A broken link or anchor, a page missing from the navigation, a settings key with no meaning or a reference
that no longer builds from the code fails the build, and so this test. The build runs with nothing importable beyond
what ``pip install -e '.[docs]'`` installs (``tests/docs/docs_extra.py``), as a writer's virtualenv would have it.
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import importlib.util
import os
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import artifact, chromium
from tests.host.processes import worker_environment
from worker.ops import cli
from worker.settings import config as settings
from worker.settings import function_settings

REPO = Path(__file__).resolve().parents[2]


def build(out: Path) -> Path:
    env = worker_environment(DOCS_SCREENSHOTS="0", NO_MKDOCS_2_WARNING="1")
    built = subprocess.run(
        [sys.executable, "-m", "tests.docs.docs_extra", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(*path, name), *subcommands(sub, (*path, name))]
    return found


@pytest.mark.subprocess
def test_the_site_builds_strict_and_holds_what_its_references_promise(tmp_path: Path) -> None:
    """One build (about 2 s), every check on it: a build per check would cost a build per test process."""
    site = build(tmp_path / "site")
    start_page_and_guides(site)
    cli_reference(site)
    settings_reference(site)
    nothing_fetched_at_view_time(site)
    api_reference(site)
    changelog_and_examples(site)
    pages_load_in_chromium_without_console_errors(site)
    search_answers_on_pages_opened_from_disk(site)


def start_page_and_guides(site: Path) -> None:
    for page in (
        "index",
        "start",
        "apps",
        "leases",
        "backends",
        "settings",
        "operating",
        "deploying",
        "spark",
        "functions",
        "lambda",
        "middleware",
        "security",
        "troubleshooting",
        "faq",
        "examples",
        "changelog",
        "reference/cli",
        "reference/settings",
        "reference/api",
    ):
        assert (site / f"{page}.html").is_file(), page
    assert "worker init hello-app" in text(site / "start.html")
    for image in ("message-path.svg", "lease-timeline.svg", "console-functions.png", "console-poison.png"):
        assert (site / "images" / image).stat().st_size > 0, image
    assert "<svg" in (site / "images" / "lease-timeline.svg").read_text(encoding="utf-8")


def cli_reference(site: Path) -> None:
    """Every command and flag of the CLI's parser."""
    page = text(site / "reference" / "cli.html")
    parser = cli._parser()
    commands = subcommands(parser)
    assert {("init",), ("completion",), ("spark", "stop")} <= set(commands)
    for path in commands:
        assert f"worker {' '.join(path)}" in page, path
    flags = {
        option
        for action in [a for p in commands for a in _parser_of(parser, p)._actions]
        for option in action.option_strings
    }
    assert {"--burst", "--processes", "--ttl", "--delay", "--max", "--memory"} <= flags
    for flag in flags:
        assert flag in page, flag


def _parser_of(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def settings_reference(site: Path) -> None:
    """Every key the loader accepts."""
    page = text(site / "reference" / "settings.html")
    for key in [
        *settings._SCHEMA,
        *(f"functions.<name>.{key}" for key in function_settings.IN_SECTION),
        "connections.<name>",
        *settings.IGNORED_HOST_JSON_KEYS,
    ]:
        assert key in page, key
    assert "1 .. 1024" in page and "FUNCTIONS_WORKER_PROCESS_COUNT" in page and "batchSize / 2 × processors" in page


def nothing_fetched_at_view_time(site: Path) -> None:
    """No script, stylesheet, image or font from another site."""
    for page in site.glob("**/*.html"):
        source = page.read_text(encoding="utf-8")
        assert not re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//", source), page
        assert "fonts.googleapis" not in source and "fonts.gstatic" not in source, page


def api_reference(site: Path) -> None:
    """The public API, from its docstrings."""
    import worker

    page = text(site / "reference" / "api.html")
    for name in worker.__all__:
        assert name in page, name
    assert worker.QueueMessage.__doc__.split("\n")[0].strip()[:40] in page


def changelog_and_examples(site: Path) -> None:
    """CHANGELOG.md, with a heading for the version pyproject.toml gives; and every folder of examples/ with what it
    says of itself (its docstring's first line) and its app in full."""
    import ast
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    changelog = text(site / "changelog.html")
    assert re.search(rf"^{re.escape(version)} - \d{{4}}-\d{{2}}-\d{{2}}", changelog, re.M), version
    assert "Keep a Changelog" in changelog

    page = text(site / "examples.html")
    folders = sorted(path for path in (REPO / "examples").iterdir() if path.is_dir() and path.name[0] not in "._")
    assert {folder.name for folder in folders} >= {"hello", "chain", "poison", "functions_v2"}
    for folder in folders:
        source = (folder / "function_app.py").read_text(encoding="utf-8")
        assert f"{folder.name}/" in page, folder.name
        assert ast.get_docstring(ast.parse(source)).splitlines()[0] in page, folder.name
        assert f"examples/{folder.name}/function_app.py" in page, folder.name
        assert max(source.splitlines(), key=len).strip() in page, folder.name


#: Pages looked at in a real browser: the start, a guide with the diagrams drawn at build time, a generated reference.
LOOKED_AT = ("index.html", "leases.html", "reference/cli.html")


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- the base class's name
        """A line per request on stderr would bury the test's own output."""


def pages_load_in_chromium_without_console_errors(site: Path) -> None:
    """Served over HTTP as a user's static host would (the theme's search runs in a worker, which file:// refuses),
    each page renders its title and logs no error in Chromium's console; a screenshot of each is kept."""
    handler = functools.partial(_QuietFiles, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        try:
            with chromium() as driver:
                for page in LOOKED_AT:
                    driver.get(f"http://127.0.0.1:{server.server_address[1]}/{page}")
                    assert driver.find_element("css selector", "article h1").text, page
                    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
                    assert errors == [], (page, errors)
                    driver.save_screenshot(str(artifact("docs-" + page.replace("/", "-").removesuffix(".html"))))
        finally:
            server.shutdown()


def search_answers_on_pages_opened_from_disk(site: Path) -> None:
    """Opened as file:// (the README says to open site/index.html), the search box finds pages: Material's offline
    plugin inlines the index as a script, and its worker runs in an iframe through the shim the site serves."""
    with chromium() as driver:
        for page in ("index.html", "reference/cli.html"):
            driver.get((site / page).as_uri())
            driver.find_element("css selector", "input.md-search__input").click()
            driver.find_element("css selector", "input.md-search__input").send_keys("poison")
            results = _poll(lambda: driver.find_elements("css selector", ".md-search-result__item"), 15)
            assert results, (page, driver.find_element("css selector", ".md-search-result__meta").text)
            assert "Poison handling" in " ".join(result.text for result in results), page
            link = results[0].find_element("css selector", "a").get_attribute("href")
            assert link.startswith("file://") and ".html" in link, link
            errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
            assert errors == [], (page, errors)
        driver.save_screenshot(str(artifact("docs-search-from-disk")))


def _poll(check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.mark.subprocess
def test_the_screenshot_hook_takes_the_console_of_a_running_worker_in_chromium() -> None:
    spec = importlib.util.spec_from_file_location("docs_screenshots", REPO / "docs" / "hooks" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith(("WORKER__", "AzureWebJobs"))}
    try:
        shots = hook.take()
    finally:
        os.environ.update(saved)

    assert set(shots) == {"images/console-functions.png", "images/console-poison.png"}
    for name, png in shots.items():
        assert png[:8] == b"\x89PNG\r\n\x1a\n", name
        width, height = struct.unpack(">II", png[16:24])
        assert width >= 800 and height >= 300, (name, width, height)


def test_without_chromium_the_build_skips_the_screenshots_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer with only the docs extra and no Chromium still builds: placeholders, and one line saying why."""
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import Files

    (tmp_path / "docs").mkdir()
    config = MkDocsConfig()
    config.load_dict(
        {
            "site_name": "t",
            "docs_dir": str(tmp_path / "docs"),
            "site_dir": str(tmp_path / "site"),
            "hooks": [str(REPO / "docs" / "hooks" / "screenshots.py")],
        }
    )
    assert config.validate() == ([], [])
    [hook] = config.hooks.values()
    monkeypatch.setattr(hook, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("DOCS_SCREENSHOTS", raising=False)
    with caplog.at_level("INFO", logger="mkdocs.plugins.screenshots"):
        files = config.plugins.on_files(Files([]), config=config)

    assert {file.src_uri for file in files} == set(hook.SHOTS)
    assert all(file.content_bytes == hook.placeholder() for file in files)
    [note] = [record for record in caplog.records if record.name == "mkdocs.plugins.screenshots"]
    assert note.levelname == "INFO"  # a warning would fail the --strict build
    assert "screenshots skipped" in note.getMessage() and "no-chromium" in note.getMessage()
    assert "apt-get install -y chromium chromium-driver" in note.getMessage()

    monkeypatch.setenv("DOCS_SCREENSHOTS", "1")  # asked for: a missing browser is an error
    with pytest.raises(PluginError, match="no-chromium"):
        config.plugins.on_files(Files([]), config=config)
