"""Compare a notebook's printed outputs with those of a git revision, across cell boundaries.

    .venv/bin/python scripts/compare_outputs.py book/02_inside_tiny_gpt.ipynb [REV]     # REV: HEAD by default

For a refactor of a notebook (a cell split in two, a helper moved into lib): re-execute it
(`scripts/execute_notebooks.py book/NN.ipynb`), then this says whether every printed text is what REV printed.
It concatenates, in order, every code cell's stdout/stderr and the text/plain and text/html of its displays
(pictures left out: their bytes depend on fonts), joins consecutive streams, and diffs the two sequences, so
moving a print from one cell to the next changes nothing.  Exits 1 and prints the diff when they differ.
"""

import difflib
import json
import re
import subprocess
import sys

PICTURES = [(re.compile(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+"), "IMG"),
            (re.compile(r"<svg.*?</svg>", re.S), "SVG"), (re.compile(r"<Figure size [^>]*>"), "<Figure>")]


def printed(notebook: dict) -> list:
    """[(kind, text)] of every output of the notebook's code cells, in order, consecutive streams joined."""
    out = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            if output["output_type"] == "stream":
                text = "".join(output["text"])
                if out and out[-1][0] == output["name"]:
                    out[-1] = (output["name"], out[-1][1] + text)
                else:
                    out.append((output["name"], text))
            elif output["output_type"] in ("display_data", "execute_result"):
                for mime in ("text/plain", "text/html"):
                    if mime in output.get("data", {}):
                        text = "".join(output["data"][mime])
                        for pattern, stand_in in PICTURES:
                            text = pattern.sub(stand_in, text)
                        out.append((mime, text))
            elif output["output_type"] == "error":
                out.append(("error", f"{output['ename']}: {output['evalue']}"))
    return out


def main(path: str, revision: str = "HEAD") -> int:
    old_source = subprocess.run(["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True)
    new, old = printed(json.load(open(path, encoding="utf-8"))), printed(json.loads(old_source.stdout))
    if new == old:
        print(f"{path}: {len(new)} printed outputs, identical to {revision}")
        return 0
    lines = lambda outputs: [f"[{kind}] {line}" for kind, text in outputs for line in text.splitlines()]
    print("\n".join(list(difflib.unified_diff(lines(old), lines(new), revision, "working tree", lineterm="", n=1))[:200]))
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
