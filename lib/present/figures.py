"""The figures a notebook prints, recorded unrounded, so that two runs on different CPU kernels can be compared.

    BOOK_FIGURE_LOG=_build/figures/05.jsonl pytest --nbval book/05_electra.ipynb   # every fmt() call appended
    differences(read(record_of(notebook)), read(other_log))   # [] when every figure agrees to TOLERANCE

Every number the book prints goes through `plots.fmt` (and `plots.table`, which calls it). When the
environment variable BOOK_FIGURE_LOG names a file, `fmt` appends each figure to it, unrounded, with the
line of the notebook cell that printed it (the first caller outside lib/). `scripts/execute_notebooks.py` runs
each notebook on the executing machine's own kernels and commits that record with the outputs (`record_of`);
`make test` runs it again under nbval on OTHER_KERNELS (`scripts/run_checks.py`) and compares the two records:
a figure that moves by more than float64's rounding was computed in float32 somewhere (against the rule of
`lib.measure.precision`), and some CPU will print other digits for it, even where both runs happen to round to
the same text.

>>> differences([["a.py:3", 0.5], ["a.py:3", 2.0]], [["a.py:3", 0.5 + 1e-12], ["a.py:3", 2.0]])
[]
>>> differences([["a.py:3", 0.5085270, "auc = swap(model)"]], [["a.py:3", 0.5084820, "auc = swap(model)"]])
['figure 1 (auc = swap(model)): 0.508527 vs 0.508482, difference 4.5e-05']
"""

import json
import linecache
import math
import os
import sys
from pathlib import Path

ENV = "BOOK_FIGURE_LOG"
# The same arithmetic on other CPU kernels than this machine's native ones (read when torch starts: set them for
# the process, e.g. a notebook's kernel): MKL's AVX2 branch (any MKL_CBWR value gives on an AMD EPYC what an
# Intel Xeon prints; on an AVX-512 Xeon it is not the native branch either), oneDNN at SSE4.1 (on an Intel Xeon it
# gives what an AMD EPYC prints, where MKL_CBWR does not: CONTRIBUTING.md), and ATen's AVX2 code. MKL's SSE2 branch
# (MKL_CBWR=COMPATIBLE) catches float32 as well, but runs the float64 measurements 1.7x slower
# (scripts/bench_measurement_speed.py --kernels). Not ATen's scalar code ("default"): it draws other random
# numbers (torch.randn, an untrained network's weights) than its AVX2 and AVX-512 code, which agree, and training
# already needs AVX2.
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
TOLERANCE = 1e-9       # relative (absolute below 1): float64 noise is ~1e-15, float32's ~1e-7
LIB = str(Path(__file__).resolve().parent.parent)
RECORDS = Path(LIB).parent / "tests" / "figures"


def record_of(notebook) -> Path:
    """Where the figures of `notebook` (a path), as its committed outputs printed them, are recorded."""
    return RECORDS / f"{Path(notebook).stem}.jsonl"


def cell_file(source: str) -> str:
    """The name of the file a kernel runs a cell's code from, which a record's `where` begins with: ipykernel
    names it by a hash of the cell's source, the same in every kernel.

    >>> cell_file("print(1)")
    '3773950048.py'
    """
    from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86
    return f"{murmur2_x86(source, get_tmp_hash_seed())}.py"


def rerun_by_nbval(record: list, cells: list) -> list:
    """The figures of `record` printed by cells (notebook cells, `nbformat`) that nbval runs again: not those of
    an NBVAL_SKIP cell (a timing, whose output is the last execution's)."""
    skipped = {cell_file(cell.source) for cell in cells if cell.cell_type == "code" and "NBVAL_SKIP" in cell.source}
    return [figure for figure in record if figure[0].split(":")[0] not in skipped]


def record(x) -> None:
    """Append the figure x (a number) to the file BOOK_FIGURE_LOG names, if it names one."""
    path = os.environ.get(ENV)
    if not path:
        return
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(LIB):
        frame = frame.f_back              # the notebook's line, not fmt's or table's
    where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"   # a cell's file is named by its source
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()[:100]
    with open(path, "a") as log:
        log.write(json.dumps([where, float(x), text]) + "\n")


def read(path) -> list:
    """[[where, value, line], ...] from a record (empty when the file does not exist)."""
    try:
        with open(path) as log:
            return [json.loads(line) for line in log]
    except FileNotFoundError:
        return []


def differences(first: list, second: list, tolerance: float = TOLERANCE) -> list:
    """One line for each figure that differs between two records of the same notebook (NaN equals NaN)."""
    if [where for where, *_ in first] != [where for where, *_ in second]:
        return [f"the runs printed different figures: {len(first)} and {len(second)} in all"]
    found = []
    for number, ((_, a, *line), (_, b, *_)) in enumerate(zip(first, second), 1):
        same = a == b or (math.isnan(a) and math.isnan(b))
        if not same and not abs(a - b) <= tolerance * max(1.0, abs(a), abs(b)):
            found.append(f"figure {number} ({line[0] if line else '?'}): {a:.6g} vs {b:.6g}, difference "
                         f"{abs(a - b):.2g}")
    return found
