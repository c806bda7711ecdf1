"""Browser check of the built book: no request leaves _build/html, no console error, every formula rendered,
every image loaded, static sliders work.

    make book && .venv/bin/python scripts/check_static_site.py [page.html ...]

Needs Debian's chromium (`apt-get install chromium`, and `fonts-noto-cjk` for the Chinese text); `.ci/run`
installs both when missing and runs this after `make test`.  For each page it records every network
request and console error (via the DevTools protocol), counts formulas MathJax left unrendered and images
that did not load, then moves every slider of the page to each combination of positions and checks that
exactly one pre-computed view is visible and that it is the one the positions select.
"""

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

SITE = Path(__file__).resolve().parent.parent / "_build" / "html"
PORT = 9333

MOVE_ALL_SLIDERS = """(() => {
  const report = [];
  document.querySelectorAll('.book-slider').forEach((root, n) => {
    const inputs = [...root.querySelectorAll('input')];
    const states = [...root.querySelectorAll('.book-slider-state')];
    const sizes = inputs.map(s => +s.max + 1);
    const combinations = sizes.reduce((a, b) => a * b, 1);
    for (let k = 0; k < combinations; k++) {
      let rest = k;
      for (let j = inputs.length - 1; j >= 0; j--) {  // mixed radix, last slider fastest
        inputs[j].value = rest % sizes[j]; rest = Math.floor(rest / sizes[j]);
        inputs[j].dispatchEvent(new Event('input'));
      }
      const visible = states.map((d, i) => d.style.display !== 'none' ? i : -1).filter(i => i >= 0);
      report.push({slider: n, position: k, visible: visible, expected: [JSON.parse(root.dataset.views)[k]]});
    }
  });
  return JSON.stringify(report);
})()"""


RENDERING = """(() => JSON.stringify({
  images: document.images.length,
  broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(-60)),
  formulas: document.querySelectorAll('.math').length,
  unrendered: [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container'))
                 .map(e => e.textContent.slice(0, 40)),
}))()"""


def main(pages):
    pages = pages or sorted(str(p.relative_to(SITE)) for p in SITE.glob("book/*.html"))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--remote-debugging-port={PORT}", f"--remote-allow-origins=http://127.0.0.1:{PORT}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(50):
                try:
                    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json"))
                    break
                except OSError:
                    time.sleep(0.2)
            page = next(t for t in targets if t["type"] == "page")
            ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
            failures = 0
            for name in pages:
                failures += check_page(ws, (SITE / name).resolve())
        finally:
            browser.terminate()
            browser.wait()
    print("all pages passed" if not failures else f"{failures} problems")
    return 1 if failures else 0


def check_page(ws, path: Path) -> int:
    ids = iter(range(1, 10**6))

    def call(method, **params):
        ws.send(json.dumps({"id": (i := next(ids)), "method": method, "params": params}))
        while True:
            message = json.loads(ws.recv())
            if message.get("method") == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
            if message.get("method") == "Runtime.exceptionThrown":  # e.g. a SyntaxError in an inline script
                details = message["params"]["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description", details["text"]).splitlines()[0])
            if message.get("method") == "Runtime.consoleAPICalled" and message["params"]["type"] == "error":
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in message["params"]["args"]))
            if message.get("method") == "Log.entryAdded" and message["params"]["entry"]["level"] == "error":
                errors.append(message["params"]["entry"]["text"])
            if message.get("id") == i:
                return message.get("result", {})

    requests, errors = [], []
    call("Network.enable")
    call("Runtime.enable")
    call("Log.enable")
    call("Page.enable")
    call("Page.navigate", url=path.as_uri())
    time.sleep(3)  # let deferred scripts (MathJax) run
    call("Runtime.evaluate", expression="1")  # drain events
    outside = [u for u in requests if not (u.startswith(SITE.as_uri()) or u.startswith("data:"))]
    shown = json.loads(call("Runtime.evaluate", expression=RENDERING)["result"]["value"])
    report = json.loads(call("Runtime.evaluate", expression=MOVE_ALL_SLIDERS)["result"]["value"])
    wrong = [r for r in report if r["visible"] != r["expected"]]
    print(f"{path.name}: {len(requests)} requests, {len(outside)} outside the site {outside[:3]}; "
          f"{shown['formulas']} formulas, {len(shown['unrendered'])} unrendered {shown['unrendered'][:3]}; "
          f"{shown['images']} images, {len(shown['broken'])} not loaded {shown['broken'][:3]}; "
          f"{len(report)} slider positions checked, {len(wrong)} wrong {wrong[:3]}; "
          f"{len(errors)} console errors {errors[:3]}")
    for method in ("Network.disable", "Runtime.disable", "Log.disable"):
        call(method)
    return len(outside) + len(shown["unrendered"]) + len(shown["broken"]) + len(wrong) + len(errors)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
