"""Checks on the committed notebooks that nbval cannot make.

1. Every code cell is executed, without errors, and no ipywidgets state is
   saved (a notebook without outputs would pass nbval vacuously; saved widget
   state would make the book load widget code from a CDN).
2. Prose figures: every number in a notebook's Markdown must be among the
   numbers its outputs print.  Exempt are quotations, written 「…」 and followed
   by their source in 〔…〕 (e.g. 「0.409」〔讲义 §3.1〕), the sources themselves,
   headings, list markers, code spans and math.  Numbers glued to a letter or a
   hyphen on their left are names, not figures (GPT-3, T5, log2), and §01 is a section.
"""

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
NUMBER = re.compile(r"(?<![A-Za-z_\-\d.,§])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|(?<![A-Za-z_\-\d.,§])\d+(?:\.\d+)?(?!\d)")
QUOTE = re.compile(r"「([^」]*)」(〔[^〕]+〕)?")
SOURCE = re.compile(r"〔[^〕]*〕")
NOT_PROSE = [re.compile(r"```.*?```", re.S), re.compile(r"\$\$.*?\$\$", re.S)] + [re.compile(p, re.M) for p in (
    r"`[^`]*`", r"\$[^$]*\$", r"^#+ .*$", r"^\s*(?:\d+\.|[-*])\s", r"\]\([^)]*\)", r"<[^>]*>")]


def numbers(text: str) -> list:
    return [n.replace(",", "") for n in NUMBER.findall(text)]


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def output_text(nb) -> str:
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            for mime in ("text/plain", "text/html", "text/markdown"):
                parts.append("".join(out.get("data", {}).get(mime, "")))
    return "\n".join(parts)


def prose_figures(markdown: str):
    """(figures to check, quoted figures, quotations lacking a source)."""
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    quoted, unsourced = [], []
    for m in QUOTE.finditer(markdown):
        quoted += numbers(m.group(1))
        if numbers(m.group(1)) and not m.group(2):
            unsourced.append(m.group(0))
    markdown = SOURCE.sub(" ", QUOTE.sub(" ", markdown))
    return numbers(markdown), quoted, unsourced


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_executed_without_errors_or_widget_state(path):
    nb = load(path)
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert code, f"{path.name} has no code"
    assert all(c.get("execution_count") for c in code), f"{path.name}: run `make execute` and commit"
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert "widgets" not in nb["metadata"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_in_the_prose_is_an_output(path, request):
    nb = load(path)
    printed = set(numbers(output_text(nb)))
    markdown = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    checked, quoted, unsourced = prose_figures(markdown)
    exempt_cells = sum(1 for c in nb["cells"] if c["cell_type"] == "code"
                       and re.search(r"NBVAL_(IGNORE_OUTPUT|SKIP)", "".join(c["source"])))
    request.config.__dict__.setdefault("book_prose_figures", []).append((path.name, len(checked), len(quoted), exempt_cells))
    assert not unsourced, f"quotations without a 〔source〕: {unsourced}"
    missing = sorted({n for n in checked if n not in printed}, key=float)
    assert not missing, f"{path.name}: figures in the prose that no output prints: {missing}"


def test_the_figure_checker_catches_what_it_should():
    checked, quoted, unsourced = prose_figures(
        "模型是 0.545 bits，「0.409」〔讲义 §3〕，GPT-3 有「175B」〔Brown et al. 2020〕。`x = 3` 和 $d = 64$\n"
        "## 2. 标题 12\n1. 列表 109,056 和 「7」")
    assert checked == ["0.545", "109056"] and quoted == ["0.409", "175", "7"] and unsourced == ["「7」"]
