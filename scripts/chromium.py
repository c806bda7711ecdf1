"""Debian's chromium driven by Playwright: the one browser the checks share (`check_static_site.py` for the
built book, `check_lab.py` for JupyterLab).

    with chromium.page() as (page, seen):
        page.goto("http://127.0.0.1:8888/lab")
        page.evaluate("document.title")
        seen.requests, seen.errors      # every request the page made, every console error and uncaught exception

Playwright launches the system's chromium (`executable_path`), so it never downloads a browser of its own
(no `playwright install`); `.ci/run` installs Debian's chromium and the CJK font when missing.
"""

import shutil
from contextlib import contextmanager
from types import SimpleNamespace

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

EXECUTABLE = shutil.which("chromium") or "/usr/bin/chromium"


@contextmanager
def page(width: int = 1280, height: int = 900):
    """A headless chromium with a fresh profile; yields its one page and what it has seen so far."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=EXECUTABLE, args=["--no-sandbox", "--disable-gpu"])
        try:
            tab = browser.new_page(viewport={"width": width, "height": height})
            seen = SimpleNamespace(requests=[], errors=[])
            tab.on("request", lambda request: seen.requests.append(request.url))
            # console.error(...) and the browser's own error log (a resource that failed to load)
            tab.on("console", lambda message: message.type == "error" and seen.errors.append(message.text))
            tab.on("pageerror", lambda error: seen.errors.append(str(error).splitlines()[0]))  # uncaught exception
            yield tab, seen
        finally:
            browser.close()


def wait_for(tab, expression: str, timeout: float, what: str):
    """Poll a JavaScript expression until it is truthy; return its value, or raise TimeoutError after `timeout` s."""
    try:
        return tab.wait_for_function(expression, timeout=timeout * 1000, polling=250).json_value()
    except PlaywrightTimeout:
        raise TimeoutError(f"waited {timeout:.0f} s for {what}") from None
