"""Browser check of the built book: no request leaves _build/html, no console error, every formula rendered,
every image loaded, static sliders work, every table fits the content column.

    make book && .venv/bin/python scripts/check_static_site.py [page.html ...]

Needs Debian's chromium (`apt-get install chromium`, and `fonts-noto-cjk` for the Chinese text); `.ci/run`
installs both when missing and runs this after `make test`.  For each page it records every network
request and console error (Playwright driving Debian's chromium, `chromium.py`), counts formulas MathJax left unrendered and images
that did not load, then moves every slider of the page to each combination of positions and checks that
exactly one pre-computed view is visible and that it is the one the positions select.  Tables (the pandas
tables of the outputs and the Markdown tables of the prose) must be no wider than the content column and keep
every header cell on one or two lines.
"""

import json
import sys
import time
from pathlib import Path

import chromium

SITE = Path(__file__).resolve().parent.parent / "_build" / "html"

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


# Tables must fit the content column, their header cells on at most two lines (a line box is a distinct top
# among the cell text's client rectangles).
TABLES = """(async () => {
  await document.fonts.ready;   // line breaks depend on the (CJK) font
  const column = document.querySelector('.bd-article').clientWidth;
  const lines = cell => { const r = document.createRange(); r.selectNodeContents(cell);
                          return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; };
  return JSON.stringify([...document.querySelectorAll('.bd-article table')].map(t => ({
    width: Math.round(t.getBoundingClientRect().width), column: column,
    header_lines: Math.max(0, ...[...t.querySelectorAll('thead th')].map(lines)),
    header: [...t.querySelectorAll('thead th')].map(h => h.textContent.trim()).filter(x => x).join(' | ').slice(0, 70),
  })).filter(t => t.width > t.column || t.header_lines > 2));
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
    failures = 0
    with chromium.page() as (tab, seen):
        for name in pages:
            failures += check_page(tab, seen, (SITE / name).resolve())
    print("all pages passed" if not failures else f"{failures} problems")
    return 1 if failures else 0


def check_page(tab, seen, path: Path) -> int:
    seen.requests.clear()
    seen.errors.clear()
    tab.goto(path.as_uri())
    time.sleep(3)  # let deferred scripts (MathJax) run
    outside = [u for u in seen.requests if not (u.startswith(SITE.as_uri()) or u.startswith("data:"))]
    shown = json.loads(tab.evaluate(RENDERING))
    report = json.loads(tab.evaluate(MOVE_ALL_SLIDERS))
    wrong = [r for r in report if r["visible"] != r["expected"]]
    misfit = json.loads(tab.evaluate(TABLES))  # an async function's promise: Playwright awaits it
    errors = list(seen.errors)
    print(f"{path.name}: {len(seen.requests)} requests, {len(outside)} outside the site {outside[:3]}; "
          f"{shown['formulas']} formulas, {len(shown['unrendered'])} unrendered {shown['unrendered'][:3]}; "
          f"{shown['images']} images, {len(shown['broken'])} not loaded {shown['broken'][:3]}; "
          f"{len(report)} slider positions checked, {len(wrong)} wrong {wrong[:3]}; "
          f"{len(misfit)} tables wider than the column or with headers on 3+ lines {misfit[:3]}; "
          f"{len(errors)} console errors {errors[:3]}")
    return len(outside) + len(shown["unrendered"]) + len(shown["broken"]) + len(wrong) + len(misfit) + len(errors)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
