"""The console in a real browser (headless Chromium): what an operator sees, and what the page lets them do.

One worker process of the console app (tests/apps/console_app.py: a quick, a slow and a fragile function, with
two-second leases so that renewals come every second) and one browser serve the whole module; each test uses
its own function's queue. Screenshots of each view go to test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

import pytest

from tests.console.browser import artifact, chromium, screenshot
from tests.console.support import APP, ConsoleHost
from tests.host.processes import WorkerProcess, worker_environment, write_host_yaml
from tests.support import free_port, poll

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

pytestmark = pytest.mark.subprocess

TOKEN = "console-test-token"
T = TypeVar("T")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleHost]:
    folder = tmp_path_factory.mktemp("console")
    port = free_port()
    config = write_host_yaml(folder, worker={"httpPort": port, "leaseDuration": "2s", "drainTimeout": "2s"})
    env = worker_environment(CONSOLE_DIR=str(folder), WORKER_HTTP_TOKEN=TOKEN)
    worker = WorkerProcess(config, env, app=APP).start()
    try:
        worker.wait_for_log("host started")
        yield ConsoleHost(worker, port, folder, TOKEN)
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def page(host: ConsoleHost) -> Iterator[WebDriver]:
    """The console open in Chromium, the token entered in its form (as an operator would)."""
    with chromium() as driver:
        driver.get(host.url)
        poll(lambda: "needs the endpoint token" in text(driver, "#problem"), 15, what="the page to ask for the token")
        driver.get_log("browser")  # the refused request's 401 is logged by Chromium; what follows must be clean
        driver.find_element("css selector", "#token").send_keys(TOKEN)
        driver.find_element("css selector", "#token-form button").click()
        poll(lambda: driver.find_elements("css selector", "article[data-function]"), 15, what="the functions view")
        yield driver


def read(driver: WebDriver, selector: str, how: Callable[[WebElement], T]) -> list[T]:
    """``how`` of every element ``selector`` finds. The page redraws every few seconds, which can replace an
    element between finding and reading it: they are then found again."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(5):
        try:
            return [how(element) for element in driver.find_elements("css selector", selector)]
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} was redrawn under every read")


def text(driver: WebDriver, selector: str) -> str:
    """The text of the first element ``selector`` finds; "" when none does."""
    return next(iter(read(driver, selector, lambda element: element.text)), "")


def attributes(driver: WebDriver, selector: str, name: str) -> list[str]:
    return [value or "" for value in read(driver, selector, lambda element: element.get_attribute(name))]


def field(driver: WebDriver, function: str, name: str) -> str:
    return text(driver, f'article[data-function="{function}"] [data-field="{name}"]')


def test_the_page_loads_without_errors_and_shows_the_start_up_facts(page: WebDriver, host: ConsoleHost) -> None:
    page.refresh()  # the token stays for the tab's session
    poll(lambda: "console_app" in text(page, '[data-fact="app"]'), 15, what="the start-up facts")
    assert [entry for entry in page.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")] == []
    assert text(page, "#ready") == "ready"
    assert "worker.leaseDuration: 2" in text(page, '[data-fact="settings not at their defaults"]')
    assert str(host.folder / "host.yaml") in text(page, '[data-fact="settings file"]')
    assert set(attributes(page, "article[data-function]", "data-function")) == {"quick", "slow", "fragile"}
    screenshot(page, "#facts", "start-up")
    page.set_window_size(390, 844)  # a phone
    try:
        page.execute_script("window.scrollTo(0, 0)")
        page.save_screenshot(str(artifact("phone")))
        assert page.execute_script("return document.documentElement.scrollWidth") <= 390
    finally:
        page.set_window_size(1280, 1000)


def test_a_message_sent_shows_in_the_depth_then_in_the_rates(page: WebDriver, host: ConsoleHost) -> None:
    assert field(page, "quick", "depth") == "0"
    host.send("console-quick", "hello console", delay=6)  # held invisible in the queue for six seconds
    poll(lambda: field(page, "quick", "depth") == "1", 15, what="the depth to show the message")
    assert "1 invisible" in text(page, 'article[data-function="quick"] .stat')
    poll(lambda: "quick hello console" in host.handled(), 20, what="the handler to run")
    poll(lambda: field(page, "quick", "received-rate") not in ("", "0"), 15, what="the received rate")
    poll(lambda: field(page, "quick", "succeeded-rate") not in ("", "0"), 15, what="the succeeded rate")
    poll(lambda: field(page, "quick", "depth") == "0", 15, what="the depth to go back to 0")
    assert field(page, "quick", "totals") == "1 · 1 · 0"
    screenshot(page, "#functions", "functions")


def test_a_long_handlers_lease_shows_with_its_renewals_growing(page: WebDriver, host: ConsoleHost) -> None:
    message_id = host.send("console-slow", "20")
    row = f'#lease-table tr[data-message-id="{message_id}"]'

    def renewals() -> int | None:
        value = text(page, f'{row} [data-field="renewals"]')
        return int(value) if value.isdigit() else None

    first = poll(lambda: renewals() is not None and (renewals(),), 20, what="the lease to show")[0]
    poll(lambda: (renewals() or 0) > first, 15, what=f"its renewals to grow past {first}")
    poll(lambda: "long" in attributes(page, row, "class"), 10, what="the lease to stand out as long")
    assert text(page, f'{row} [data-field="dequeueCount"]') == "1"
    assert "slow" in text(page, row)
    screenshot(page, "#leases", "leases")


def test_a_poisoned_message_is_shown_and_requeued_from_the_page_only_with_the_token(
    page: WebDriver, host: ConsoleHost
) -> None:
    body = '<img src=x onerror="window.pwned=1"> not HTML'
    host.send("console-fragile", body)
    row = 'article[data-poison="fragile"] tr'
    poll(lambda: body in text(page, 'article[data-poison="fragile"] pre.body'), 20, what="the poison message")
    [message_id] = attributes(page, f"{row}[data-message-id]", "data-message-id")
    assert page.execute_script("return window.pwned") is None  # shown as text, never parsed as HTML
    poll(lambda: "the mended file is not there" in text(page, "#failure-table"), 15, what="the failure's reason")
    assert "poisoned" in text(page, "#failure-table tr[data-message-id]")
    assert "the mended file is not there" in text(page, f'{row} [data-field="lastFailure"]')  # kept with the copy
    assert text(page, f'{row} [data-field="attempts"]').isdigit()
    screenshot(page, "#poison", "poison")
    screenshot(page, "#failures", "failures")

    # Without the token, or with a wrong one, nothing moves.
    for token in (None, "wrong-token"):
        for action, payload in (("requeue", {"messageId": message_id}), ("requeue-all", None), ("purge", None)):
            status, answer = host.request(f"/console/api/poison/fragile/{action}", method="POST", token=token, body=payload)
            assert status == 401, answer
    assert host.request("/console/api/poison/fragile/requeue-all", method="GET", token=TOKEN)[0] == 405
    assert [p["count"] for p in host.state()["poison"] if p["function"] == "fragile"] == [1]

    (host.folder / "mended").touch()
    button = f'{row}[data-message-id="{message_id}"] button[data-action="requeue"]'
    assert read(page, button, lambda element: element.click()) == [None]
    alert = page.switch_to.alert
    assert message_id in alert.text
    alert.accept()
    poll(lambda: f"fragile {body}" in host.handled(), 20, what="the requeued message to be handled")
    poll(lambda: "requeue: 1 message(s)" in text(page, "#action-status"), 10, what="the page to say it moved")
    poll(lambda: field(page, "fragile", "totals").startswith("2 · 1"), 15, what="the success to be counted")
    [logged] = host.worker.wait_for_events("poison action from the console", 1, 10)
    assert (logged["action"], logged["function"], logged["messages"], logged["message_id"], logged["peer"]) == (
        "requeue",
        "fragile",
        1,
        message_id,
        "127.0.0.1",
    )


def test_the_charts_draw_the_hosts_samples(page: WebDriver, host: ConsoleHost) -> None:
    """Last: by now the host has taken samples every ten seconds, and the quick message of an earlier test counts."""
    chart = 'article[data-function="quick"] [data-chart="{}"] svg'
    for name in ("depth", "rate"):
        poll(
            lambda name=name: page.find_elements("css selector", f"{chart.format(name)} polyline"),
            30,
            what=f"a line in the {name} chart",
        )
    screenshot(page, "#functions", "functions-with-charts")
