"""End to end in a real browser: headless Debian chromium (Selenium + chromedriver) against the
real `wharf console` process and a real broker. Create a topic, send, find the message by key,
open it, reset a group, and check what each page shows."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from wharf.client import MessageQueue
from wharf.client.console.render import time_input
from wharf.client.sync import Admin, Producer, PullConsumer

from tests.console.browser import ConsoleProcess, browser_missing, chromium_driver
from tests.console.helpers import wait_dispatched
from tests.harness import BrokerProcess

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("console") / "console.log"
    with ConsoleProcess(broker.endpoint, log) as process:
        yield process.url


@pytest.fixture(scope="module")
def driver():  # type: ignore[no-untyped-def]
    if (why := browser_missing()) is not None:  # make system-deps installs both packages
        pytest.fail(why, pytrace=False)
    browser = chromium_driver()
    try:
        yield browser
    finally:
        browser.quit()


def _wait_for(driver, css: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def _wait_for_text(driver, css: str, text: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    """The element once its text holds ``text``: a form posted from a page that already shows a
    ``.done`` (the previous action's) is answered by a new page, and the old element is still
    there until it loads."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, css), text)
    )
    return driver.find_element(By.CSS_SELECTOR, css)


def _fill(driver, form: str, values: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    for field, value in values.items():
        element = driver.find_element(By.CSS_SELECTOR, f"{form} [name={field}]")
        if element.tag_name == "select" or element.get_attribute("type") == "datetime-local":
            driver.execute_script("arguments[0].value = arguments[1]", element, value)
        else:
            element.clear()
            element.send_keys(value)
    driver.find_element(By.CSS_SELECTOR, f"{form} button").click()


def test_topic_send_find_open(driver, console: str, broker: BrokerProcess, name: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    driver.get(f"{console}/topics")
    _fill(driver, "#create-topic", {"name": name, "queues": "2", "message_type": "NORMAL"})
    done = _wait_for(driver, ".done")
    assert f"topic {name} created with 2 queues" in done.text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 2

    _fill(driver, "#send-message", {"key": "order-42", "body": '{"order": 42}'})
    assert "sent to" in _wait_for_text(driver, ".done", "sent to").text
    wait_dispatched(broker.endpoint, name, 1)  # in the key index

    driver.get(f"{console}/messages")
    _fill(driver, "#search", {"topic": name, "key": "order-42"})
    results = _wait_for(driver, "#results")
    rows = results.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 1 and "order-42" in rows[0].text
    rows[0].find_element(By.CSS_SELECTOR, "a").click()
    body = _wait_for(driver, "#body")
    assert body.text == '{\n  "order": 42\n}'
    assert driver.find_element(By.ID, "keys").text == "order-42"
    assert "queue" in driver.find_element(By.ID, "stored").text

    driver.get(f"{console}/topics?q={name}")
    row = driver.find_element(By.CSS_SELECTOR, f'tr[data-topic="{name}"]')
    assert row.find_element(By.CSS_SELECTOR, "td.messages").text == "1"


def test_reset_group_and_overview(driver, console: str, broker: BrokerProcess, name: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    group = f"{name}-g"
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        admin.create_topic(name, queue_nums=1)
        admin.create_group(group)
        start = int(time.time() * 1000) - 1000
        producer.send_batch(name, [b"a", b"b", b"c", b"d", b"e"], queue_id=0)
    wait_dispatched(broker.endpoint, name, 5)
    with PullConsumer(broker.endpoint, group) as consumer:
        consumer.commit(MessageQueue(name, 0), 5)

    driver.get(f"{console}/groups?q={group}")
    row = driver.find_element(By.CSS_SELECTOR, f'tr[data-group="{group}"]')
    assert row.find_element(By.CSS_SELECTOR, "td.lag").text == "0"
    row.find_element(By.CSS_SELECTOR, "a").click()
    _wait_for(driver, "#reset-offsets")
    _fill(driver, "#reset-offsets", {"topic": name, "time": time_input(start)})
    assert "q0=0" in _wait_for(driver, ".done").text
    assert driver.find_element(By.ID, "total-lag").text == "5"

    driver.get(console)
    assert "UP" in driver.find_element(By.ID, "brokers").text
    _wait_for(driver, "#chart svg path.series-in", timeout=15)  # the live chart drew a line
    assert "No alerts." in driver.page_source


def test_login_form_session_cookie_and_csp(  # type: ignore[no-untyped-def]
    driver, broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A console with a token: a page opens the login form, the token typed in it opens a
    session (an HttpOnly, SameSite=Strict cookie that is not the token), the pages and the live
    chart work under the CSP with nothing reported, the old URL login is refused, log out."""
    from selenium.webdriver.common.by import By

    token = "browser-login-t0ken"
    log = tmp_path_factory.mktemp("console-login") / "console.log"
    with ConsoleProcess(broker.endpoint, log, "--auth-token", token) as process:
        driver.delete_all_cookies()  # cookies are per host, not port: the other console's
        driver.get_log("browser")  # drop what earlier tests logged
        try:
            driver.get(f"{process.url}/groups")
            _wait_for(driver, "form#login")
            driver.find_element(By.CSS_SELECTOR, "#login [name=token]").send_keys(token)
            driver.find_element(By.CSS_SELECTOR, "#login button").click()
            _wait_for_text(driver, "h1", "Consumer groups")
            assert driver.current_url == f"{process.url}/groups"  # back where it was going
            cookies = {c["name"]: c for c in driver.get_cookies()}
            session = cookies["wharf_console_session"]
            assert session["httpOnly"] and session["sameSite"] == "Strict"
            assert token not in session["value"] and "wharf_console_token" not in cookies
            assert "wharf_console_session" not in driver.execute_script("return document.cookie")

            driver.get(f"{process.url}/")  # the overview's script and its fetches under the CSP
            _wait_for(driver, "#chart svg path.series-in", timeout=15)
            violations = [
                e for e in driver.get_log("browser") if "Content Security" in e["message"]
            ]
            assert violations == []

            driver.get(f"{process.url}/login?token={token}")
            assert "no longer goes in the URL" in driver.page_source

            driver.get(f"{process.url}/topics")
            driver.find_element(By.CSS_SELECTOR, "#logout button").click()
            _wait_for(driver, "form#login")
            driver.get(f"{process.url}/topics")
            _wait_for(driver, "form#login")  # the session is closed
        finally:
            driver.delete_all_cookies()
