"""Exercise checkers: the reader writes an answer in a cell, `check` says right or wrong.

    >>> check(None, 4)
    还没有作答：把 answer 改成你的答案，再运行这一格。
    False
    >>> check(0.1 + 0.2, 0.3, tolerance=1e-9)
    ✓ 正确
    True

The expected value should be computed by the notebook (from lib), not typed
in; the worked solution goes in a collapsed <details> block below the cell.

    exercise_cells("book/01_tokenization.ipynb")   # {"1.1": (title, its code cells), ...}
    verdicts("student.ipynb")                       # {"1.1": ["right", "not answered"], ...}: what check printed
"""

import json
import re
from pathlib import Path


def check(answer, expected, tolerance: float = None) -> bool:
    """Print whether `answer` equals `expected` (within `tolerance` for numbers); return it."""
    if answer is None or answer is Ellipsis:
        print("还没有作答：把 answer 改成你的答案，再运行这一格。")
        return False
    try:
        right = abs(answer - expected) <= tolerance if tolerance is not None else answer == expected
    except TypeError:
        right = False
    print("✓ 正确" if right else f"✗ 还不对（你的答案：{answer!r}）。再想一想，或展开下面的答案。")
    return bool(right)


# an exercise's label: a heading or a bold line "练习 N.M ..."
LABEL = re.compile(r"^(?:#+ +|\*\*)练习\s*(\d+\.\d+)(.*)$", re.M)


def exercise_cells(path):
    """{label: (title, its code cells)}: an exercise runs from its label to the next label or level-2 heading."""
    found, current = {}, None
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        label = LABEL.search(source) if cell["cell_type"] == "markdown" else None
        if label:
            title = re.search(r"（([^）]*)）|·\s*(.*)", label.group(2))
            current = found.setdefault(label.group(1), (title and (title.group(1) or title.group(2)) or "", []))
        elif cell["cell_type"] == "markdown" and re.search(r"^## ", source, re.M):
            current = None
        elif cell["cell_type"] == "code" and current:
            current[1].append(cell)
    return found


def has_checker(cells) -> bool:
    """Whether any of these code cells calls `check(...)`."""
    return any(re.search(r"\bcheck\(", "".join(cell["source"])) for cell in cells)


VERDICTS = {"✓": "right", "✗": "wrong", "还没有作答": "not answered"}


def verdicts(path):
    """{exercise: what its checkers printed} in a notebook as saved (a student's file, executed first)."""
    found = {}
    for label, (title, cells) in exercise_cells(path).items():
        printed = "".join("".join(out.get("text", "")) for cell in cells if has_checker([cell])
                          for out in cell.get("outputs", []))
        lines = [line for line in printed.splitlines() if any(mark in line for mark in VERDICTS)]
        found[label] = [next(v for mark, v in VERDICTS.items() if mark in line) for line in lines] or ["no output"]
    return found
