"""Re-execute notebooks in place so their committed outputs are fresh: `make execute`.

    python scripts/execute_notebooks.py [--parallel N] [book/01_tokenization.ipynb ...]

Runs each notebook top to bottom in a fresh kernel (cwd = its folder), N
notebooks at a time (default: one per core; they are independent once
`make checkpoints` has trained what they load), with
sliders in their static, pre-computed form, then removes what would make the
book fetch code from the internet (saved ipywidgets state) and per-run noise
(cell timings, how printed text was chunked), and writes the notebook back.  A notebook that had to train
a missing checkpoint is run a second time, so that the committed outputs are
those of a warm run: no progress bars, identical to what nbval re-executes.

Each notebook runs on this machine's own kernels (the variables of
`figures.OTHER_KERNELS` are unset for it), and every figure it prints is recorded
unrounded in tests/figures/<notebook>.jsonl (`figures.record_of`), committed with
the outputs: `make test` re-runs the notebook on the other kernels and compares.
"""

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # lib, also where the venv does not link it
from lib.present import figures  # noqa: E402


def stderr_of(nb) -> str:
    return "".join("".join(out.get("text", "")) for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.get("name") == "stderr")


def merge_streams(cell) -> None:
    """Join consecutive stdout (or stderr) chunks: how print output is chunked depends on timing."""
    merged = []
    for out in cell.get("outputs", []):
        if (merged and out.output_type == "stream" and merged[-1].output_type == "stream"
                and merged[-1].name == out.name):
            merged[-1].text += out.text
        else:
            merged.append(out)
    cell.outputs = merged


def execute(path: Path) -> None:
    record = figures.record_of(path)
    draft = record.with_suffix(".running")            # the record of this run only, kept if the run succeeds
    record.parent.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if name not in figures.OTHER_KERNELS}
    env[figures.ENV] = str(draft)
    for attempt in ("first", "second"):
        draft.unlink(missing_ok=True)
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=1800, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
        # A run that trained a missing checkpoint printed progress to stderr: run again, so the
        # committed outputs are those of a warm run (what nbval and readers see).
        if not stderr_of(nb):
            break
        print(f"{path.name}: the {attempt} run wrote to stderr:\n{stderr_of(nb)[-500:]}", file=sys.stderr)
    else:
        sys.exit(f"{path.name}: still writes to stderr on a warm run; fix it before committing")
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            merge_streams(cell)
    nbformat.write(nb, path)
    draft.touch()                                     # a notebook that prints no figure has an empty record
    draft.replace(record)


def timed_execute(path: Path) -> str:
    start = time.perf_counter()
    execute(path)
    return f"executed {path.name} in {time.perf_counter() - start:.0f} s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=os.cpu_count(), help="notebooks executed at once")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    os.environ["BOOK_STATIC_WIDGETS"] = "1"
    paths = [path.resolve() for path in args.paths or sorted((ROOT / "book").glob("*.ipynb"))]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:  # each notebook runs in its own kernel process
        for line in pool.map(timed_execute, paths):
            print(line, flush=True)
    print(f"{len(paths)} notebooks in {time.perf_counter() - start:.0f} s wall, {args.parallel} at a time")


if __name__ == "__main__":
    main()
