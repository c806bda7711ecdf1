"""Headless chromium driven through the DevTools protocol: the one browser the checks share
(`check_static_site.py` for the built book, `check_lab.py` for JupyterLab).

    with chromium() as tab:
        tab.navigate("http://127.0.0.1:8888/lab")
        tab.evaluate("document.title")
        tab.requests, tab.errors        # every request the page made, every console error and exception

Needs Debian's chromium (`apt-get install chromium`); `.ci/run` installs it when missing.
"""

import itertools
import json
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager

import websocket


class Tab:
    """One page of the browser: `call` sends a DevTools command and records the events that arrive meanwhile."""

    def __init__(self, ws):
        self.ws, self.ids = ws, itertools.count(1)
        self.requests, self.errors = [], []

    def call(self, method, **params) -> dict:
        self.ws.send(json.dumps({"id": (i := next(self.ids)), "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            event, p = message.get("method"), message.get("params", {})
            if event == "Network.requestWillBeSent":
                self.requests.append(p["request"]["url"])
            if event == "Runtime.exceptionThrown":  # e.g. a SyntaxError in an inline script
                details = p["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description", details["text"]).splitlines()[0])
            if event == "Runtime.consoleAPICalled" and p["type"] == "error":
                self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            if event == "Log.entryAdded" and p["entry"]["level"] == "error":
                self.errors.append(p["entry"]["text"])
            if message.get("id") == i:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def listen(self):
        """Start recording requests and console errors (from now on)."""
        self.requests, self.errors = [], []
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")

    def navigate(self, url: str):
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str, await_promise: bool = False):
        """The JSON-serialisable value of a JavaScript expression (a promise's value with await_promise)."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=await_promise, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str):
        """Poll a JavaScript expression until it is truthy; return its value, or raise after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"waited {timeout:.0f} s for {what}")

    def drag(self, x: float, y: float, to_x: float, to_y: float, steps: int = 10):
        """A real mouse drag: press at (x, y), move in small steps, release at (to_x, to_y); a click when they are equal."""
        self.call("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", buttons=1, clickCount=1)
        for k in range(1, steps + 1):
            self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x + (to_x - x) * k / steps,
                      y=y + (to_y - y) * k / steps, button="left", buttons=1)
        self.call("Input.dispatchMouseEvent", type="mouseReleased", x=to_x, y=to_y, button="left", clickCount=1)


@contextmanager
def chromium(port: int = 9333, width: int = 1280, height: int = 900):
    """A headless chromium with a fresh profile; yields the Tab of its one page."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", f"--remote-debugging-port={port}",
             f"--remote-allow-origins=http://127.0.0.1:{port}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            targets = []
            for _ in range(100):
                try:
                    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
                    break
                except OSError:
                    time.sleep(0.2)
            page = next(t for t in targets if t["type"] == "page")
            yield Tab(websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60))
        finally:
            browser.terminate()
            browser.wait()
