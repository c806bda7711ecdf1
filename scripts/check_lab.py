"""JupyterLab check: a book notebook opened in a running JupyterLab, run through its front end, its live
controls moved by real mouse and key events.

    .venv/bin/python scripts/check_lab.py [NOTEBOOK]      # default 03_objectives.ipynb

What a reader does after `make lab`: the notebook is copied the way `scripts/lab.py` copies it (into a
scratch folder here), JupyterLab serves it, headless chromium (Playwright, `chromium.py`) opens it and runs every
cell with JupyterLab's own "Run All" command.  Then the first number slider's handle is dragged and the
first text control (ipywidgets ToggleButtons) gets a mouse click on another label; after each move
the control's output must change and still be a real view (text or a picture), never a Python error
or a string literal (quotes and backslash-n shown instead of lines).
Fails on: a cell that ends in an error, a control that does not change its output, a console error of
the page, or any change to the committed notebooks in book/.  `.ci/run` runs it after the book check.
It also prints the resident memory of the JupyterLab server and of the notebook's kernel after the run
(one reader's share of a JupyterHub).
"""

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

import chromium
from lab import prepare

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"

# The notebook's panel among the main area's widgets (`currentWidget` follows the focus, which a headless
# browser may never give it).
PANEL = """(window.jupyterapp && Array.from(jupyterapp.shell.widgets('main'))
             .find(w => w.context && w.context.path === NAME && w.content && w.content.model))"""
STATE = f"""(() => {{
  const panel = {PANEL}, cells = panel.content.model.cells, outputs = [];
  for (let i = 0; i < cells.length; i++) {{
    const cell = cells.get(i);
    if (cell.type === 'code') outputs.push({{count: cell.executionCount, types: cell.outputs.toJSON().map(o => o.output_type),
      error: cell.outputs.toJSON().filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)[0]}});
  }}
  return {{kernel: panel.sessionContext.session && panel.sessionContext.session.kernel
                   ? panel.sessionContext.session.kernel.status : 'none', cells: outputs}};
}})()"""
# The n-th control of a kind on the page: its box (to click), its labels/value, and the text of the output
# widget of the same VBox (what render() showed).
CONTROL = """((selector, n) => {
  const control = document.querySelectorAll(selector)[n];
  if (!control) return null;
  control.scrollIntoView({block: 'center'});
  const box = control.closest('.widget-vbox'), output = box && box.querySelector('.widget-output');
  const target = control.querySelector('button:not(.mod-active)') || control.querySelector('.noUi-handle');
  const r = target.getBoundingClientRect(), track = control.querySelector('.noUi-base');
  return {x: r.x + r.width / 2, y: r.y + r.height / 2, label: target.textContent.trim(),
          track: track ? track.getBoundingClientRect().width : 0,
          value: (control.querySelector('.widget-readout') || control.querySelector('button.mod-active') || {}).textContent,
          output: output ? output.innerText : null, images: output ? output.querySelectorAll('img').length : 0,
          errors: output ? output.querySelectorAll('[data-mime-type="application/vnd.jupyter.error"], .jp-mod-error').length : 0};
})"""
# The slider first: in 03 the prefix slider only matters while the mask is "prefix LM", the initial label.
CONTROLS = {"number slider (SelectionSlider)": ".widget-slider", "text control (ToggleButtons)": ".widget-toggle-buttons"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def digests() -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in BOOK.glob("*.ipynb")}


def start_lab(folder: Path, port: int, token: str):
    """JupyterLab serving `folder`, its settings and runtime files kept in scratch folders too."""
    env = {k: v for k, v in os.environ.items() if k != "BOOK_STATIC_WIDGETS"}  # live widgets, as for a reader
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR"):
        env[name] = str(folder.parent / name.lower())
    # No "get notified about Jupyter news?" pop-up over the page's controls.
    news = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text('{"fetchNews": "false"}')
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}", "--LabApp.expose_app_in_browser=True",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}")
            return server
        except OSError:
            if server.poll() is not None:
                raise RuntimeError("JupyterLab exited at start")
            time.sleep(0.5)
    server.terminate()
    raise TimeoutError("JupyterLab did not answer within 120 s")


def memory(server) -> str:
    """The resident memory of the JupyterLab server and of the kernels it started, now."""
    kernels = psutil.Process(server.pid).children(recursive=True)
    return (f"memory now: JupyterLab server {psutil.Process(server.pid).memory_info().rss / 2**20:.0f} MB, "
            f"kernels {sum(k.memory_info().rss for k in kernels) / 2**20:.0f} MB")


def move(tab, kind: str, selector: str) -> list:
    """Move the first control of this kind; return the problems seen (empty when it worked)."""
    before = tab.evaluate(f"({CONTROL})({json.dumps(selector)}, 0)")
    if before is None:
        return [f"no {kind} on the page"]
    # A text control's label not selected gets a click (its track is 0: the drag stays put); a slider's
    # handle is dragged a fifth of its track to the right.  The page may still be scrolling the control into
    # view or laying out the widget when the first drag lands (about one run in three here), so the box is read
    # again after a pause and the drag is tried up to three times, 20 s each.
    changed = f"""(() => {{ const c = ({CONTROL})({json.dumps(selector)}, 0);
        return c && c.output !== {json.dumps(before["output"])} && c.output.trim() ? c : null; }})()"""
    for attempt in range(3):
        time.sleep(1)
        box = tab.evaluate(f"({CONTROL})({json.dumps(selector)}, 0)")
        tab.mouse.move(box["x"], box["y"])
        tab.mouse.down()
        tab.mouse.move(box["x"] + box["track"] / 5, box["y"], steps=10)
        tab.mouse.up()
        try:
            after = chromium.wait_for(tab, changed, timeout=20, what=f"the {kind}'s output to change")
            break
        except TimeoutError as error:
            if attempt == 2:
                return [f"{error} (3 tries)"]
    print(f"  {kind}: {before['value']!r} -> {after['value']!r}; output {before['output'].splitlines()[0][:60]!r} "
          f"-> {after['output'].splitlines()[0][:60]!r} ({after['images']} pictures; try {attempt + 1})")
    problems = [f"{kind}: an error in the output"] if after["errors"] else []
    if "\\n" in after["output"] or after["output"].lstrip()[:1] in "'\"":   # text shown as a Python literal
        problems.append(f"{kind}: the output is a string literal, not text: {after['output'][:80]!r}")
    return problems


def main(argv) -> int:
    name = argv[0] if argv else "03_objectives.ipynb"
    if not (BOOK / name).exists():
        raise SystemExit(f"no notebook book/{name}")
    committed, problems = digests(), []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
        folder = Path(scratch) / "lab"
        prepare(BOOK, folder)                                       # the copies `make lab` makes
        port, token = free_port(), secrets.token_hex(16)
        server = start_lab(folder, port, token)
        try:
            with chromium.page() as (tab, seen):
                tab.goto(f"http://127.0.0.1:{port}/lab/tree/{name}?token={token}", timeout=180_000)
                panel = PANEL.replace("NAME", json.dumps(name))
                chromium.wait_for(tab, f"""(() => {{ const p = {panel}; return p && p.sessionContext.session &&
                                 p.sessionContext.session.kernel && p.sessionContext.session.kernel.status === 'idle'; }})()""",
                             timeout=180, what="the notebook to open with an idle kernel")
                opened = time.monotonic()
                # Run All is JupyterLab's command; it acts on the current notebook, so make ours current first.
                tab.evaluate(f"(() => {{ const p = {panel}; jupyterapp.shell.activateById(p.id); "
                             "return jupyterapp.commands.execute('notebook:run-all-cells').then(() => true); })()")
                state = chromium.wait_for(tab, f"""(() => {{ const s = {STATE.replace("NAME", json.dumps(name))};
                    return s.kernel === 'idle' && s.cells.every(c => c.count !== null) ? s : null; }})()""",
                                     timeout=900, what="every cell to run")
                failed = [(i, c["error"]) for i, c in enumerate(state["cells"]) if c.get("error")]
                problems += [f"code cell {i}: {error}" for i, error in failed]
                print(f"{name}: {len(state['cells'])} code cells run through JupyterLab's Run All in "
                      f"{time.monotonic() - opened:.0f} s, {len(failed)} ended in an error")
                for kind, selector in CONTROLS.items():
                    problems += move(tab, kind, selector)
                problems += [f"console error: {e}" for e in seen.errors]
                print(memory(server))
        finally:
            server.terminate()
            server.wait()
    changed = [n for n, d in digests().items() if committed.get(n) != d]
    problems += [f"book/{n} changed" for n in changed]
    print(f"JupyterLab check in {time.monotonic() - start:.0f} s: "
          + ("passed" if not problems else f"{len(problems)} problems: {problems[:5]}"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
