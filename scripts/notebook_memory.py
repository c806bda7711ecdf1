"""Peak memory of each notebook's kernel: what one student's kernel needs on a shared JupyterHub or Binder.

    BOOK_NO_TRAINING=1 .venv/bin/python scripts/notebook_memory.py [book/03_objectives.ipynb ...]

Runs each notebook top to bottom in a fresh kernel (in memory: the committed notebook is not written), with
the sliders in their static form, which computes every position a reader could move them to (an upper bound
of what moving the live ones computes).  A last cell appended to the run reads the kernel's own peak
resident set size (`resource.getrusage`, `ru_maxrss`) and its children's (a training process, when one
ran).  Prints a table in MB and writes it to binder/notebook_memory.json (the notebooks measured now replace
their rows; rows of notebooks that no longer exist are dropped), which README.md and book/teachers.ipynb read.
"""

import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "binder" / "notebook_memory.json"
PEAK = ("import resource, json\n"
        "print(json.dumps({who: resource.getrusage(getattr(resource, who)).ru_maxrss\n"
        "                  for who in ('RUSAGE_SELF', 'RUSAGE_CHILDREN')}))")


def peak_rss_mb(path: Path) -> dict:
    """{"kernel": MB, "children": MB, "seconds": s} of one run of the notebook (ru_maxrss is in KiB on Linux)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK))
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    peak = json.loads(nb.cells[-1].outputs[0]["text"])
    return {"kernel": round(peak["RUSAGE_SELF"] / 1024), "children": round(peak["RUSAGE_CHILDREN"] / 1024),
            "seconds": round(time.perf_counter() - start)}


def main(argv) -> None:
    os.environ["BOOK_STATIC_WIDGETS"] = "1"
    paths = [Path(p).resolve() for p in argv] or sorted((ROOT / "book").glob("*.ipynb"))
    earlier = json.loads(OUT.read_text()) if OUT.exists() else {}
    table = {name: row for name, row in earlier.items() if (ROOT / "book" / name).exists()}
    for path in paths:
        table[path.name] = peak_rss_mb(path)
        print(f"{path.name:32s} kernel peak RSS {table[path.name]['kernel']:5d} MB, children "
              f"{table[path.name]['children']:4d} MB ({table[path.name]['seconds']} s)", flush=True)
    OUT.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    print(f"largest kernel: {max(row['kernel'] for row in table.values())} MB; written to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
