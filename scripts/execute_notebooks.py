"""Re-execute notebooks in place so their committed outputs are fresh: `make execute`.

    python scripts/execute_notebooks.py [book/01_tokenization.ipynb ...]

Runs each notebook top to bottom in a fresh kernel (cwd = its folder), with
sliders in their static, pre-computed form, then removes what would make the
book fetch code from the internet (saved ipywidgets state) and per-run noise
(cell timings), and writes the notebook back.
"""

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)


def main(paths):
    os.environ["BOOK_STATIC_WIDGETS"] = "1"
    for path in paths or sorted((ROOT / "book").glob("*.ipynb")):
        start = time.perf_counter()
        execute(Path(path).resolve())
        print(f"executed {Path(path).name} in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
