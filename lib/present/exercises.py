"""Exercise checkers: the reader writes an answer in a cell, `check` says right or wrong.

    >>> check(None, 4)
    还没有作答：把 answer 改成你的答案，再运行这一格。
    False
    >>> check(0.1 + 0.2, 0.3, tolerance=1e-9)
    ✓ 正确
    True

The expected value should be computed by the notebook (from lib), not typed
in; the worked solution goes in a collapsed <details> block below the cell.
"""


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
