"""`make lab` works on copies: the committed notebooks are never written, a reader's work is never lost."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("lab", Path(__file__).resolve().parent.parent / "scripts" / "lab.py")
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)


def test_copies_are_made_refreshed_kept_and_reset(tmp_path):
    book, work = tmp_path / "book", tmp_path / "_build" / "lab"
    book.mkdir()
    (book / "a.ipynb").write_text("a1")
    (book / "b.ipynb").write_text("b1")
    assert lab.prepare(book, work) == []
    assert (work / "a.ipynb").read_text() == "a1" and (work / "b.ipynb").read_text() == "b1"

    (work / "a.ipynb").write_text("my notes")                # the reader works in a
    (book / "b.ipynb").write_text("b2")                      # the book changes b (git pull)
    assert lab.prepare(book, work) == ["b.ipynb: updated from the book"]
    assert (work / "a.ipynb").read_text() == "my notes" and (work / "b.ipynb").read_text() == "b2"

    (book / "a.ipynb").write_text("a2")                      # the book changes the notebook the reader edited
    messages = lab.prepare(book, work)
    assert len(messages) == 1 and "--reset a.ipynb" in messages[0]
    assert (work / "a.ipynb").read_text() == "my notes"      # never overwritten
    assert lab.prepare(book, work) == messages               # and said again until the reader decides

    backup = lab.reset("a.ipynb", book, work)
    assert backup.read_text() == "my notes" and (work / "a.ipynb").read_text() == "a2"
    assert lab.prepare(book, work) == []
    assert (book / "a.ipynb").read_text() == "a2" and (book / "b.ipynb").read_text() == "b2"  # book untouched


def test_reset_of_an_unknown_notebook_says_which_exist(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "a.ipynb").write_text("a")
    try:
        lab.reset("zz.ipynb", tmp_path / "book", tmp_path / "lab")
    except SystemExit as error:
        assert "a.ipynb" in str(error)
    else:
        raise AssertionError("reset of an unknown notebook must fail")
