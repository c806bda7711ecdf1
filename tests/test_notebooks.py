"""Checks on the committed notebooks that nbval cannot make.

1. Every code cell is executed, without errors, and no ipywidgets state is
   saved (a notebook without outputs would pass nbval vacuously; saved widget
   state would make the book load widget code from a CDN).
2. Prose figures: every number in a notebook's Markdown must be among the
   numbers its outputs print.  Exempt are quotations, written 「…」 and followed
   by their source, a citation role (「50,257」{cite:p}`radford2019gpt2`) or, in
   notebooks not yet converted, 〔…〕 (「0.409」〔Raffel et al. 2019〕), the sources
   themselves, headings, list markers, code spans and math.  A Markdown table is a
   quotation when the line above it (its caption) ends with a citation role: its cells
   are quoted figures; the caption itself is prose.  Numbers glued to a letter
   or a hyphen on their left are names, not figures (GPT-3, T5, log2), and §01 is a section.
3. Citations: every key cited with a {cite…} role in a notebook or a Markdown page
   exists in book/references.bib, so the book build cannot meet an unknown key.
4. Every piece of lib that the prose names in a code span (`lib/measure/probes.py`,
   `lib.train.loop.OPTIMIZATION`) exists: a module moved in lib leaves no dead pointer in the book.
"""

import importlib

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
PAGES = sorted(BOOK.glob("*.md"))
BIBLIOGRAPHY = BOOK / "references.bib"
NUMBER = re.compile(r"(?<![A-Za-z_\-\d.,§])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|(?<![A-Za-z_\-\d.,§])\d+(?:\.\d+)?(?!\d)")
QUOTE = re.compile(r"「([^」]*)」(〔[^〕]+〕)?")
SOURCE = re.compile(r"〔[^〕]*〕")
# {cite}`k`, {cite:p}`a,b`, {cite:t}`k`, {cite:ps}`k`, ...; keys may carry {pre}/{post} text: {cite:p}`{see }k{, §2}`
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]*)`")
BIB_ENTRY = re.compile(r"^\s*@(\w+)\s*\{\s*([^,\s]+)\s*,", re.M)
NOT_PROSE = [re.compile(r"```.*?```", re.S), re.compile(r"\$\$.*?\$\$", re.S)] + [re.compile(p, re.M) for p in (
    r"`[^`]*`", r"\$[^$]*\$", r"^#+ .*$", r"^\s*(?:\d+\.|[-*])\s", r"\]\([^)]*\)", r"<[^>]*>",
    r"(?:练习|[Ee]xercises?)\s*\d+\.\d+")]  # an exercise's number ("练习 4.1") is a label, not a figure
# A Markdown table and the line above it (blank lines between are allowed): the caption, when it is not a row.
TABLE = re.compile(r"^(?P<caption>[ \t]*[^\s|][^\n]*)\n(?:[ \t]*\n)*(?P<rows>(?:[ \t]*\|[^\n]*(?:\n|$))+)", re.M)
LIB_NAME = re.compile(r"`(lib[./][\w./]*\w)`")
CITED_CAPTION = re.compile(r"〔cite〕[\s.:;。：；]*$")  # the caption ends with a citation role (already replaced)


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


def cited_keys(markdown: str) -> list:
    """Keys of the citation roles in Markdown: 'a{cite:p}`x,y`' -> ['x', 'y']."""
    return [key.strip() for target in CITE.findall(markdown)
            for key in re.sub(r"\{[^}]*\}", "", target).split(",") if key.strip()]


def bibliography_keys(bibtex: str) -> list:
    """Entry keys of a .bib file, in order (@string, @preamble and @comment are not entries)."""
    return [key for kind, key in BIB_ENTRY.findall(bibtex) if kind.lower() not in ("string", "preamble", "comment")]


def markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n\n".join("".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def prose_figures(markdown: str):
    """(figures to check, quoted figures, quotations lacking a source)."""
    markdown = CITE.sub("〔cite〕", markdown)  # a citation role is a source, like 〔…〕 (and not a code span)
    quoted, unsourced = [], []

    def cited_table(m):
        """A table under a caption that ends with a citation quotes its source: drop the rows, keep the caption."""
        if not CITED_CAPTION.search(m.group("caption")):
            return m.group(0)
        quoted.extend(numbers(m.group("rows")))
        return m.group("caption") + "\n\n"

    markdown = TABLE.sub(cited_table, markdown)
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
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
    checked, quoted, unsourced = prose_figures(markdown_of(path))
    exempt_cells = sum(1 for c in nb["cells"] if c["cell_type"] == "code"
                       and re.search(r"NBVAL_(IGNORE_OUTPUT|SKIP)", "".join(c["source"])))
    request.config.__dict__.setdefault("book_prose_figures", []).append((path.name, len(checked), len(quoted), exempt_cells))
    assert not unsourced, f"quotations without a source ({{cite:p}}`key` after 」): {unsourced}"
    missing = sorted({n for n in checked if n not in printed}, key=float)
    assert not missing, f"{path.name}: figures in the prose that no output prints: {missing}"


def test_the_figure_checker_catches_what_it_should():
    checked, quoted, unsourced = prose_figures(
        "模型是 0.545 bits，「0.409」〔讲义 §3〕，GPT-3 有「175B」〔Brown et al. 2020〕。`x = 3` 和 $d = 64$\n"
        "## 2. 标题 12\n1. 列表 109,056 和 「7」")
    assert checked == ["0.545", "109056"] and quoted == ["0.409", "175", "7"] and unsourced == ["「7」"]
    checked, quoted, unsourced = prose_figures(
        "词表停在「50,257」{cite:p}`radford2019gpt2`个 token，「15%」{cite:p}`devlin2019bert,raffel2020t5`；"
        "我们是 636 个，「28%」`code` 不算出处，「39%」")
    assert checked == ["636"] and quoted == ["50257", "15", "28", "39"] and unsourced == ["「28%」", "「39%」"]


def test_a_table_is_quoted_only_under_a_caption_that_ends_with_a_citation():
    table = "| objective | GLUE | SQuAD |\n|---|---:|---:|\n| BERT-style | 82.96 | 80.65 |\n| 15% | 83.28 | 80.88 |\n"
    checked, quoted, _ = prose_figures("**目标对比**（下游分数）{cite:p}`raffel2020t5{表 4}`：\n\n" + table + "\n我们是 0.545。")
    assert checked == ["0.545"] and quoted == ["82.96", "80.65", "15", "83.28", "80.88"]
    checked, quoted, _ = prose_figures("**目标对比**{cite:p}`raffel2020t5`\n" + table)  # no blank line: still the caption
    assert checked == [] and len(quoted) == 5
    # no citation, a citation that does not end the caption, or no caption at all: the cells are checked
    for markdown in ("**目标对比**（下游分数）：\n\n" + table,
                     "见{cite:p}`raffel2020t5`，我们自己的 12 个数：\n\n" + table,
                     table):
        checked, quoted, _ = prose_figures(markdown)
        assert {"82.96", "80.65", "15", "83.28", "80.88"} <= set(checked) and quoted == [], markdown
    # the caption stays prose: a figure in it is checked even when the table is quoted
    checked, quoted, _ = prose_figures("表里 4 种目标{cite:p}`raffel2020t5`\n\n" + table)
    assert checked == ["4"] and len(quoted) == 5


def test_every_cited_key_is_in_the_bibliography():
    known = bibliography_keys(BIBLIOGRAPHY.read_text(encoding="utf-8"))
    duplicates = sorted({key for key in known if known.count(key) > 1})
    assert not duplicates, f"{BIBLIOGRAPHY.name}: keys defined twice: {duplicates}"
    cited = {path.name: cited_keys(markdown_of(path)) for path in NOTEBOOKS + PAGES}
    assert any(cited.values()), "no {cite} roles found: has the citation syntax changed?"
    unknown = {name: sorted(set(keys) - set(known)) for name, keys in cited.items() if set(keys) - set(known)}
    assert not unknown, f"cited keys missing from {BIBLIOGRAPHY.name}: {unknown}"


def test_the_citation_checker_reads_roles_and_entries():
    assert cited_keys("见{cite:p}`a2020x, b2021y`和 {cite:t}`c` 与 {cite}`{see }d{, §2}`，`{not a role}`") == \
        ["a2020x", "b2021y", "c", "d"]
    assert bibliography_keys("@string{x = {y}}\n@inproceedings{a2020x,\n title={T}}\n  @Article{ b2021y ,}") == \
        ["a2020x", "b2021y"]


def lib_name_exists(name: str) -> bool:
    """Whether `lib/x/y.py` is a file, or `lib.x.y.Name` a module (and attributes of it).

    >>> lib_name_exists("lib/train/loop.py"), lib_name_exists("lib.train.loop.OPTIMIZATION"), lib_name_exists("lib.world")
    (True, True, False)
    """
    if "/" in name:
        return (BOOK.parent / name).exists()
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute, None)
        return found is not None
    return False


def test_every_lib_name_in_the_prose_exists():
    named = {path.name: set(LIB_NAME.findall(markdown_of(path))) for path in NOTEBOOKS + PAGES}
    assert sum(map(len, named.values())) > 10, "no lib names found in the prose: has the pattern changed?"
    dead = {page: sorted(n for n in names if not lib_name_exists(n)) for page, names in named.items()}
    assert not any(dead.values()), f"the prose names lib code that does not exist: { {k: v for k, v in dead.items() if v} }"


def code_lines(source: str) -> int:
    r"""Lines of code in a cell: not blank, not a comment (the rule DESIGN.md's 25-line limit is counted by).

    >>> code_lines("x = 1\n\n# why\ny = 2  # fine\n")
    2
    """
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


PRIVATE_NAME = re.compile(r"(?<![\w.])(?:[A-Za-z]\w*\.)+_[A-Za-z]\w*")   # module.or.object._private


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_cells_are_short_and_call_public_names_only(path):
    cells = ["".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "code"]
    long = {i: code_lines(source) for i, source in enumerate(cells) if code_lines(source) > 25}
    assert not long, f"{path.name}: code cells over 25 lines (machinery belongs in lib): {long}"
    private = sorted({name for source in cells for name in PRIVATE_NAME.findall(source)})
    assert not private, f"{path.name} reaches into private names: {private}"
    assert PRIVATE_NAME.findall("x = moe.MoELayer._routed(h) + np.pi") == ["moe.MoELayer._routed"]
