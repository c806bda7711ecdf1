"""`make lab`: JupyterLab on working copies of the notebooks, so the committed ones stay as they are.

    python scripts/lab.py                 # prepare _build/lab/, then start JupyterLab there
    python scripts/lab.py --reset NAME    # take the book's version of NAME again (yours goes to backups/)
    python scripts/lab.py --prepare-only  # only prepare the copies
    python scripts/lab.py --link-repo     # only make `import lib` work in every kernel of this Python

JupyterLab writes into the notebook it has open: autosave, a live slider's output in place of the
committed static one, a changed kernelspec.  The committed notebooks are the book (the HTML build and
nbval read them), so a reader works on copies in _build/lab/ (ignored by git):

- a missing copy is made from book/;
- a copy the reader has not changed is refreshed when the book's notebook changes (e.g. after git pull);
- a copy the reader has changed is never overwritten; if the book's notebook changed too, a line says
  so and names the command that takes the new version (the reader's copy is moved to backups/ first).

The intro page (intro.md) is copied the same way, so a JupyterHub or Binder can open it first.

The notebooks find `lib` through the Python environment (a .pth file, `link_repo`: `make` writes it into
.venv, binder/postBuild into the image's environment) and their data and checkpoints through lib's own
paths, so they run the same from the copy.
"""

import argparse
import hashlib
import json
import os
import shutil
import site
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ".copies.json"   # {notebook name: sha256 of the book's version it was copied from}
PAGES = ("*.ipynb", "intro.md")  # what a reader gets a working copy of


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(lab: Path) -> dict:
    path = lab / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_manifest(lab: Path, copied: dict) -> None:
    (lab / MANIFEST).write_text(json.dumps(copied, indent=1, sort_keys=True) + "\n")


def prepare(book: Path, lab: Path) -> list:
    """Make, refresh or keep each copy (see the module docstring); returns one line per thing a reader
    should know."""
    lab.mkdir(parents=True, exist_ok=True)
    copied, messages = read_manifest(lab), []
    for source in sorted(p for pattern in PAGES for p in book.glob(pattern)):
        copy, book_sha = lab / source.name, digest(source)
        if not copy.exists():
            shutil.copyfile(source, copy)
            copied[source.name] = book_sha
        elif digest(copy) == copied.get(source.name):          # untouched by the reader
            if book_sha != copied[source.name]:
                shutil.copyfile(source, copy)
                copied[source.name] = book_sha
                messages.append(f"{source.name}: updated from the book")
        elif book_sha != copied.get(source.name):               # the reader's copy, and the book moved on
            messages.append(f"{source.name}: the book's version changed; yours is kept. To take the book's: "
                            f"python scripts/lab.py --reset {source.name}")
    write_manifest(lab, copied)
    return messages


def reset(name: str, book: Path, lab: Path) -> Path:
    """Replace the copy of `name` by the book's version; the reader's copy moves to lab/backups/."""
    source = book / name
    if not source.exists():
        raise SystemExit(f"no notebook {name!r} in {book}; choose one of "
                         f"{sorted(p.name for p in book.glob('*.ipynb'))}")
    copy, backup = lab / name, None
    if copy.exists():
        backup = lab / "backups" / f"{source.stem}-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(copy, backup)
    shutil.copyfile(source, copy)
    write_manifest(lab, read_manifest(lab) | {name: digest(source)})
    return backup


def link_repo(repo: Path = ROOT) -> Path:
    """Write book_repo.pth into this Python's site-packages: `import lib` then works in every kernel that this
    Python runs, from any folder (the working copies in _build/lab/ included)."""
    path = Path(site.getsitepackages()[0], "book_repo.pth")
    path.write_text(f"{repo}\n")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reset", metavar="NAME", action="append", default=[],
                        help="take the book's version of this notebook again (repeatable)")
    parser.add_argument("--prepare-only", action="store_true", help="prepare the copies, do not start JupyterLab")
    parser.add_argument("--link-repo", action="store_true",
                        help="only write the .pth file that makes `import lib` work in this Python's kernels")
    args = parser.parse_args(argv)
    if args.link_repo:
        print(f"import lib: {ROOT} (written to {link_repo()})")
        return
    book, lab = ROOT / "book", ROOT / "_build" / "lab"
    for name in args.reset:
        backup = reset(name, book, lab)
        print(f"{name}: the book's version" + (f"; yours is in {backup.relative_to(ROOT)}" if backup else ""))
    for line in prepare(book, lab):
        print(line)
    print(f"working copies in {lab.relative_to(ROOT)}/; the committed notebooks in book/ are not touched")
    if args.prepare_only or args.reset:
        return
    command = [sys.executable, "-m", "jupyter", "lab", f"--notebook-dir={lab}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main()
