"""Debian's headless Chromium driven by Selenium through Debian's chromedriver.

Both paths are given, so Selenium Manager never runs and nothing downloads a browser or a driver.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Set by .ci/run when apt-get could not install the browser: the only reason the UI test may skip.
NO_BROWSER_ENV = "SMART_EXT_NO_BROWSER"


def no_browser_reason() -> str | None:
    """Why there is no browser (only when CI said apt-get failed), else None."""
    return os.environ.get(NO_BROWSER_ENV) or None


def chromium(window: tuple[int, int] = (1400, 1000)) -> webdriver.Chrome:
    """A fresh headless Chromium (own profile dir, no background traffic)."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="smart-ext-chromium-")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={window[0]},{window[1]}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
