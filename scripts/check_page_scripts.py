"""After a book build: no page loads a script from outside the site or declares a constant twice.

    jupyter-book build . && .venv/bin/python scripts/check_page_scripts.py [_build/html]

A browser-free stand-in for part of check_static_site.py that `make test` can run anywhere.
Two inline scripts with the same `const`/`let` declaration throw "Identifier ... has already been
declared" (seen: sphinx_thebe's THEBE_JS_URL, written twice by Sphinx 7.4).
"""

import re
import sys
from collections import Counter
from pathlib import Path

SITE = Path(__file__).resolve().parent.parent / "_build" / "html"
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)
DECLARATION = re.compile(r"\b(?:const|let|class)\s+([A-Za-z_$][\w$]*)")
# what a page loads (not what it links to): scripts, styles, images, frames from another host, or a CDN address
THIRD_PARTY = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//[^"']*|unpkg\.com|cdn\.jsdelivr""")


def page_problems(page: str) -> list[str]:
    """What is wrong with one page's HTML, e.g. ['const THEBE_JS_URL declared 2 times']."""
    declared = Counter(name for body in INLINE_SCRIPT.findall(page) for name in DECLARATION.findall(body))
    problems = [f"const {name} declared {n} times" for name, n in sorted(declared.items()) if n > 1]
    problems += [f"third-party reference {m.group(0)!r}" for m in THIRD_PARTY.finditer(page)]
    return problems


def main(site: Path = SITE) -> int:
    pages = sorted(site.rglob("*.html"))
    failures = 0
    for path in pages:
        for problem in page_problems(path.read_text(encoding="utf8")):
            print(f"{path.relative_to(site)}: {problem}")
            failures += 1
    print(f"{len(pages)} pages, {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else SITE))
