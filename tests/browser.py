"""Headless Chromium for the tests that need a real browser (the "Add to Slack" install).

Debian's `chromium` and `chromium-driver` packages, driven by Selenium. Without them a test skips
with the line that says how to install them, except under `CI=true`, where it fails: a CI that
skips its browser test proves nothing (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil

import pytest

INSTALL = "apt-get install -y chromium chromium-driver"


def chromium() -> object:
    """A headless Chromium driven by Selenium (the caller quits it)."""
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        reason = f"no {', '.join(missing)} for the browser test ({INSTALL})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the browser test is required: {reason}", pytrace=False)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1000,700"):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
