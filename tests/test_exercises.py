"""The teachers page's readers: exercises and their checkers found in a notebook, a student's verdicts read back;
the cold training time of runs with parents."""

import json

from lib.present.exercises import check, exercise_cells, verdicts
from lib.train import processes
from lib.train.cache import Run
from lib.trainers.char_lm import train_char_lm


def notebook(tmp_path, cells):
    path = tmp_path / "student.ipynb"
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    return path


def md(text):
    return {"cell_type": "markdown", "source": text}


def code(text, printed=""):
    return {"cell_type": "code", "source": text, "outputs": [{"name": "stdout", "text": printed}] if printed else []}


def test_an_exercise_runs_from_its_label_to_the_next_heading_and_its_verdicts_are_what_check_printed(tmp_path, capsys):
    check(3, 4)
    wrong = capsys.readouterr().out
    path = notebook(tmp_path, [md("## 练习 1.1 · 手算"), code("answer = 4\ncheck(answer, 4)", "✓ 正确\n"),
                               md("**练习 1.2**（第二道）"), code("answer = 3\ncheck(answer, 4)", wrong),
                               code("x = 1"), md("## 下一部分"), code("check(None, 1)", "")])
    found = exercise_cells(path)
    assert list(found) == ["1.1", "1.2"] and found["1.2"][0] == "第二道" and len(found["1.2"][1]) == 2
    assert verdicts(path) == {"1.1": ["right"], "1.2": ["wrong"]}          # the cell after "## 下一部分" is no exercise's


def test_a_run_waits_for_its_parent_when_trained_cold():
    parent = Run("p", {"steps": 100}, train_char_lm)
    child = Run("c", {"steps": 100, "x": 1}, train_char_lm, (parent,))
    other = Run("o", {"steps": 100, "x": 2}, train_char_lm)
    seconds = processes.estimated_seconds([parent, child, other], processes.recorded_seconds())
    assert processes.with_parents([child]) == [child, parent]
    assert processes.cold_seconds([child]) == seconds["p"] + seconds["c"]               # one after the other
    assert processes.cold_seconds([parent, other]) == max(seconds["p"], seconds["o"])   # side by side
