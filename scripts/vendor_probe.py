"""Experiment (#45): is float32 measurement on training's pinned kernels the same on Intel and AMD?

    .venv/bin/python scripts/vendor_probe.py --record scripts/vendor_probe/NAME.json.gz [book/05_electra.ipynb ...]
    .venv/bin/python scripts/vendor_probe.py --compare scripts/vendor_probe/NAME.json.gz

Every number a notebook prints is measured in float64 (lib.measure.precision) because float32 printed other digits
on an AMD EPYC than on an Intel Xeon. float64 costs 1.3-2x per notebook (CONTRIBUTING.md). If float32 on the
kernels training is pinned to (cache.TRAINING_KERNELS, oneDNN off, one thread) gave the same figures on both
vendors, the rule could be that instead. Training under the pin is *not* vendor-neutral (the README's digests), so
this is doubtful; it was measured for one figure only.

--record executes each notebook (all of book/ by default) in a fresh kernel as nbval does (BOOK_NO_TRAINING=1,
static sliders), measuring in float32 (BOOK_MEASURE_DTYPE=float32) on the pinned kernels, and writes every figure
it prints (lib.present.figures) with this CPU's name to the file. --compare does the same here and compares, figure
by figure, with a file recorded on another machine: run it on the other vendor. Nothing under book/ is written.
"""

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.present import figures  # noqa: E402
from lib.train.cache import TRAINING_KERNELS  # noqa: E402
from lib.train.processes import cpu_name  # noqa: E402

PIN_IN_KERNEL = "import torch\ntorch.backends.mkldnn.enabled = False\ntorch.set_num_threads(1)\n"   # as training


def pinned_float32_figures(notebook: Path) -> list:
    """[[where, value, line], ...]: every figure `notebook` prints, measured in float32 on training's pinned kernels."""
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PIN_IN_KERNEL))
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "figures.jsonl"
        env = dict(os.environ, **TRAINING_KERNELS, PYTHONPATH=str(ROOT), BOOK_NO_TRAINING="1", BOOK_STATIC_WIDGETS="1",
                   TQDM_DISABLE="1", BOOK_MEASURE_DTYPE="float32", OMP_NUM_THREADS="1", **{figures.ENV: str(log)})
        NotebookClient(nb, timeout=1800, kernel_name="python3",
                       resources={"metadata": {"path": str(notebook.parent)}}).execute(env=env)
        return figures.read(log)


def run_all(notebooks: list) -> dict:
    out = {}
    for notebook in notebooks:
        start = time.perf_counter()
        out[notebook.name] = pinned_float32_figures(notebook)
        print(f"{notebook.name}: {len(out[notebook.name])} figures in {time.perf_counter() - start:.0f} s", flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", type=Path, metavar="FILE", help="write this machine's figures to FILE (.json.gz)")
    action.add_argument("--compare", type=Path, metavar="FILE", help="compare this machine's figures with FILE")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args()
    if args.compare:
        theirs = json.loads(gzip.decompress(args.compare.read_bytes()))
        notebooks = [ROOT / "book" / name for name in theirs["figures"]]
        print(f"recorded on: {theirs['cpu']} ({theirs['commit']}); here: {cpu_name()}")
        if subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", theirs["commit"], "--", "book", "lib", "data",
                           "checkpoints"]).returncode:
            print(f"warning: book/, lib/, data/ or checkpoints/ differ from {theirs['commit']}, where the record was "
                  f"made: compare in a worktree of it (git worktree add DIR {theirs['commit']})")
    else:
        notebooks = [n.resolve() for n in args.notebooks] or sorted((ROOT / "book").glob("*.ipynb"))
    ours = run_all(notebooks)
    if args.record:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        record = {"cpu": cpu_name(), "machine": platform.machine(), "commit": commit,
                  "kernels": dict(TRAINING_KERNELS, mkldnn="off", threads=1, dtype="float32"),
                  "figures": {name: [[where, value] for where, value, _ in figs] for name, figs in ours.items()}}
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_bytes(gzip.compress(json.dumps(record).encode(), mtime=0))
        print(f"{sum(map(len, ours.values()))} figures of {len(ours)} notebooks written to {args.record}")
        return 0
    differ = 0
    for name, figs in ours.items():
        found = figures.differences(figs, [[where, value] for where, value in theirs["figures"][name]])
        differ += len(found)
        print(f"{name}: {len(found)} of {len(figs)} figures differ by more than {figures.TOLERANCE:g}"
              + "".join(f"\n  {line}" for line in found[:5]))
    print(f"in all {differ} figures differ: float32 on the pinned kernels is "
          + ("the same on both machines for every figure" if not differ else "not the same on both machines"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
