"""Benchmark: each notebook's warm run time, measuring in float32 and in float64, side by side.

    .venv/bin/python scripts/bench_precision.py [--before REV] [--repeats 2] [book/05_electra.ipynb ...]
    .venv/bin/python scripts/bench_precision.py --same-tree [...]    # this tree, BOOK_MEASURE_DTYPE=float32 vs float64

With --before, float32 is a git revision before the float64 rule (its own notebooks, which may print less);
with --same-tree, both runs are this tree's notebooks and only the measuring dtype differs (what the rule costs).

The notebooks are executed as nbval executes them (a fresh kernel, static sliders, BOOK_NO_TRAINING=1), one at a
time, alternating the two trees so that a change of the machine's speed hits both: the revision REV is checked out
into a temporary worktree and its kernels import lib from there (PYTHONPATH). Prints each notebook's seconds in
each tree (the fastest of the repeats) and their ratio. Nothing under book/ or checkpoints/ is written.
Timings depend on what else the machine is doing: run it on a quiet machine.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def run_seconds(notebook: Path, tree: Path, dtype: str = None) -> float:
    """Wall seconds of one top-to-bottom run of `notebook` in a fresh kernel that imports lib from `tree`
    (measuring in `dtype` where given: BOOK_MEASURE_DTYPE)."""
    nb = nbformat.read(notebook, as_version=4)
    env = dict(os.environ, PYTHONPATH=str(tree), BOOK_NO_TRAINING="1", BOOK_STATIC_WIDGETS="1",
               **({"BOOK_MEASURE_DTYPE": dtype} if dtype else {}))
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(notebook.parent)}})
    start = time.perf_counter()
    client.execute(env=env)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="eae4512", help="a revision that measures in float32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--same-tree", action="store_true", help="this tree in float32 against float64")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args()
    notebooks = [n.resolve() for n in args.notebooks] or sorted((ROOT / "book").glob("[0-9]*.ipynb"))
    if args.same_tree:
        print(f"{'notebook':<32} {'float32 (s)':>11} {'float64 (s)':>11} {'ratio':>6}", flush=True)
        for notebook in notebooks:
            times = {"float32": [], "float64": []}
            for _ in range(args.repeats):
                for dtype in times:
                    times[dtype].append(run_seconds(notebook, ROOT, dtype))
            b, a = min(times["float32"]), min(times["float64"])
            print(f"{notebook.stem:<32} {b:11.1f} {a:11.1f} {a / b:6.2f}", flush=True)
        return
    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(before), args.before], cwd=ROOT,
                       check=True)
        try:
            print(f"{'notebook':<32} {'float32 (s)':>11} {'float64 (s)':>11} {'ratio':>6}", flush=True)
            for notebook in notebooks:
                old = before / notebook.relative_to(ROOT)
                times = {"before": [], "after": []}
                for _ in range(args.repeats):
                    times["before"].append(run_seconds(old, before))
                    times["after"].append(run_seconds(notebook, ROOT))
                b, a = min(times["before"]), min(times["after"])
                print(f"{notebook.stem:<32} {b:11.1f} {a:11.1f} {a / b:6.2f}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)


if __name__ == "__main__":
    sys.exit(main())
