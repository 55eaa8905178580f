"""Browser steps for the UI test on both Airflow lines: Airflow's own login page, its navigation, reading our
pages' rendered rows and fetching URLs with the browser's session (tests/integration/test_ui_live.py)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from airflow_harness.env import AirflowEnv

PAGE_PREFIX = "/smart-ext/"


def base_url(env: AirflowEnv) -> str:
    """3.x: the api-server; 2.11: the webserver under the host name of its base_url (session cookie)."""
    return env.api_url if env.api_url else f"http://localhost:{env.webserver_port}"


def wait_for(what: str, probe: Any, timeout: float = 60, driver: WebDriver | None = None) -> Any:
    """Poll ``probe()`` until it returns something truthy; fail with ``what`` (and the URL) on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = probe()
        except WebDriverException as err:  # element detached while the page re-renders: try again
            found, last_error = None, err
        if found:
            return found
        time.sleep(0.25)
    where = f" at {driver.current_url}" if driver is not None else ""
    raise AssertionError(f"timed out waiting for {what}{where} ({last_error!r})")


def _visible(driver: WebDriver, css: str) -> WebElement | None:
    return next((e for e in driver.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()), None)


def login(driver: WebDriver, env: AirflowEnv, user: str) -> None:
    """Log in through Airflow's own login page (3.x simple auth manager, 2.11 FAB)."""
    base = base_url(env)
    driver.get(f"{base}/auth/login" if env.is_airflow3 else f"{base}/login/")
    name_css = "input[name=username], input#username"
    username = wait_for("the login form", lambda: _visible(driver, name_css), driver=driver)
    username.send_keys(user)
    password = wait_for(
        "the password field", lambda: _visible(driver, "input[name=password], input#password"), driver=driver
    )
    password.send_keys(env.ui_passwords[user], Keys.ENTER)
    wait_for(f"{user} to be logged in", lambda: "login" not in driver.current_url, driver=driver)


def _click_text(driver: WebDriver, text: str) -> bool:
    """Click the visible link/button/menu item whose own text is ``text`` (True when one was clicked)."""
    xpath = (
        f"//*[self::a or self::button or @role='menuitem' or @role='button']"
        f"[normalize-space(.)='{text}' or .//*[normalize-space(text())='{text}']]"
    )
    for element in driver.find_elements(By.XPATH, xpath):
        if element.is_displayed():
            element.click()
            return True
    return False


def open_from_nav(driver: WebDriver, env: AirflowEnv, name: str) -> None:
    """Open one of our views the way a user does: Airflow's home page -> "Browse" -> ``name``. On 3.x the
    page is shown inside Airflow's UI (an iframe): the driver is switched into it."""
    base = base_url(env)
    driver.switch_to.default_content()
    driver.get(f"{base}/" if env.is_airflow3 else f"{base}/home")
    wait_for("Airflow's Browse menu", lambda: _click_text(driver, "Browse"), driver=driver)
    wait_for(f"the {name!r} menu entry", lambda: _click_text(driver, name), driver=driver)
    if env.is_airflow3:
        frame = wait_for(
            f"the {name} page inside Airflow's UI",
            lambda: next(
                (
                    f
                    for f in driver.find_elements(By.TAG_NAME, "iframe")
                    if PAGE_PREFIX in (f.get_attribute("src") or "")
                ),
                None,
            ),
            driver=driver,
        )
        driver.switch_to.frame(frame)
    wait_for(
        f"the {name} page",
        lambda: driver.find_elements(By.CSS_SELECTOR, "main, table, section"),
        driver=driver,
    )


def wait_rows(driver: WebDriver) -> list[dict[str, str]]:
    """The rendered rows of table#waits: every data-* attribute (camelCase keys), plus the condition's text."""
    script = """
        return Array.from(document.querySelectorAll('table#waits tr[data-dag-id]')).map(tr => {
            const row = Object.assign({}, tr.dataset);
            const cell = tr.querySelector('td.condition') || tr.querySelector('td code');
            row.condition = cell ? cell.textContent.trim() : '';
            return row;
        });
    """
    return list(driver.execute_script(script))


def fetch(driver: WebDriver, path: str) -> tuple[int, str]:
    """(status, body) of a GET made by the page itself: the logged-in user's cookies, no redirects followed
    (status 0 for an opaque redirect)."""
    script = """
        const [url, done] = arguments;
        fetch(url, {credentials: 'same-origin', redirect: 'manual'})
            .then(async r => done([r.status, await r.text()]))
            .catch(e => done([-1, String(e)]));
    """
    status, body = driver.execute_async_script(script, path)
    return int(status), str(body)


def anonymous_get(url: str) -> tuple[int, str, str]:
    """(status, Location header, body) of a GET with no credentials and no redirect followed."""

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=30) as resp:
            return resp.status, resp.headers.get("Location", ""), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Location", ""), err.read().decode(errors="replace")


def json_in_new_tab(driver: WebDriver) -> str:
    """Click the page's JSON link (``a.json``): it must open a new tab; the JSON text shown there (tab closed)."""
    page_window = driver.current_window_handle
    before = set(driver.window_handles)
    driver.find_element(By.CSS_SELECTOR, "a.json").click()
    (tab,) = wait_for("a new tab", lambda: set(driver.window_handles) - before, driver=driver)
    try:
        driver.switch_to.window(tab)
        return str(
            wait_for("the JSON", lambda: driver.find_element(By.TAG_NAME, "body").text.strip(), driver=driver)
        )
    finally:
        driver.close()
        driver.switch_to.window(page_window)
