"""Re-execute notebooks in place so their committed outputs are fresh: `make execute`.

    python scripts/execute_notebooks.py [book/01_tokenization.ipynb ...]

Runs each notebook top to bottom in a fresh kernel (cwd = its folder), with
sliders in their static, pre-computed form, then removes what would make the
book fetch code from the internet (saved ipywidgets state) and per-run noise
(cell timings, how printed text was chunked), and writes the notebook back.  A notebook that had to train
a missing checkpoint is run a second time, so that the committed outputs are
those of a warm run: no progress bars, identical to what nbval re-executes.
"""

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


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
    for attempt in ("first", "second"):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=1800, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
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


def main(paths):
    os.environ["BOOK_STATIC_WIDGETS"] = "1"
    for path in paths or sorted((ROOT / "book").glob("*.ipynb")):
        start = time.perf_counter()
        execute(Path(path).resolve())
        print(f"executed {Path(path).name} in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
