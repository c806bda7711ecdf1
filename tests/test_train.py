"""Training is bit-reproducible; the checkpoint cache retrains exactly when it must."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lib import base_model, checkpoints
from lib.checkpoints import Run

TINY = dict(base_model.BASE_MODEL, model=dict(vocab_size=44, context=96, d_model=16, n_layers=1, n_heads=2),
            steps=40, batch_size=8, eval_every=20)


def test_two_trainings_from_scratch_are_bit_identical():
    (a, log_a), (b, log_b) = base_model.train_char_lm(TINY), base_model.train_char_lm(TINY)
    assert log_a == log_b
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def test_training_lowers_the_loss():
    _, log = base_model.train_char_lm(dict(TINY, steps=100))
    assert log[-1]["val_loss"] < log[0]["val_loss"] - 0.3


def test_checkpoint_is_reused_then_retrained_when_corrupt_or_stale(tmp_path, capsys):
    model, log = checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert "tiny.pt: missing; training 'tiny' from scratch" in capsys.readouterr().err
    first_bytes = (tmp_path / "tiny.pt").read_bytes()

    again, log_again = checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert log_again == log and capsys.readouterr().err == ""  # loaded: no message, no progress bar
    assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), again.state_dict().values()))

    (tmp_path / "tiny.pt").write_bytes(first_bytes[: len(first_bytes) // 2])  # a torn write
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    message = capsys.readouterr().err.splitlines()[0]  # one line, then the progress bar
    assert message.startswith("checkpoint tiny.pt: unreadable (")
    assert (tmp_path / "tiny.pt").read_bytes() == first_bytes  # the retrain is bit-identical, file included

    checkpoints.get_or_train("tiny", dict(TINY, steps=41), base_model.train_char_lm, tmp_path)
    assert "tiny.pt: stale" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp"))


def test_training_runs_on_pinned_kernels_whatever_the_callers_environment(tmp_path):
    """The same checkpoint, asked for from a process started on other CPU kernels (the generic
    ATen and MKL code, oneDNN limited to SSE4.1): without the pin its weights differ."""
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path / "native")
    other = dict(os.environ, ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", ONEDNN_MAX_CPU_ISA="SSE41")
    code = ("import sys; from pathlib import Path; from lib import base_model, checkpoints; "
            f"checkpoints.get_or_train('tiny', {TINY!r}, base_model.train_char_lm, Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], env=other, check=True,
                   cwd=Path(checkpoints.__file__).parent.parent, capture_output=True)
    assert (tmp_path / "other" / "tiny.pt").read_bytes() == (tmp_path / "native" / "tiny.pt").read_bytes()


def test_parallel_training_gives_the_checkpoints_of_one_at_a_time(tmp_path):
    runs = [Run(f"tiny{seed}", dict(TINY, seed=seed), base_model.train_char_lm) for seed in (0, 1)]
    assert checkpoints.train_missing(runs, processes=2, directory=tmp_path / "parallel") == ["tiny0", "tiny1"]
    for run in runs:
        checkpoints.train_missing([run], processes=1, directory=tmp_path / "alone")
        assert (tmp_path / "parallel" / f"{run.name}.pt").read_bytes() == (tmp_path / "alone" / f"{run.name}.pt").read_bytes()
    assert checkpoints.train_missing(runs, directory=tmp_path / "parallel") == []  # all current: nothing trained


def failing_train(config, desc):
    raise RuntimeError("this run is broken")


def test_a_failing_run_is_named_and_the_others_are_kept(tmp_path, capsys):
    runs = [Run("broken", TINY, failing_train), Run("fine", TINY, base_model.train_char_lm)]
    with pytest.raises(RuntimeError, match=r"training failed for \['broken'\]"):
        checkpoints.train_missing(runs, processes=2, directory=tmp_path)
    assert "this run is broken" in capsys.readouterr().err
    assert checkpoints.is_current("fine", TINY, base_model.train_char_lm, tmp_path)


def test_checkpoint_key_ignores_comments_and_docstrings_but_not_code(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""doc"""\ndef f():\n    """doc"""\n    return 1  # comment\n')
    a = checkpoints._source_digest([source])
    source.write_text('"""other doc"""\ndef f():\n    return 1\n')
    assert checkpoints._source_digest([source]) == a
    source.write_text('def f():\n    return 2\n')
    assert checkpoints._source_digest([source]) != a


def test_checkpoint_key_covers_exactly_the_lib_modules_training_imports():
    names = {p.name for p in checkpoints.lib_dependencies(Path(base_model.__file__))}
    assert names == {"base_model.py", "evals.py", "models.py", "masks.py", "objectives.py", "seeding.py",
                     "tokenizers.py", "train.py", "world.py"}


def test_is_current_says_whether_get_or_train_would_load(tmp_path):
    assert not checkpoints.is_current("tiny", TINY, base_model.train_char_lm, tmp_path)
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert checkpoints.is_current("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert not checkpoints.is_current("tiny", dict(TINY, steps=41), base_model.train_char_lm, tmp_path)


def test_checking_or_loading_leaves_the_global_random_state_alone(tmp_path):
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checkpoints.is_current("tiny", TINY, base_model.train_char_lm, tmp_path)
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert torch.equal(torch.rand(3), expected)


def test_the_committed_checkpoints_are_exactly_the_declared_runs_and_current():
    from lib import schedule
    runs = schedule.book_runs()
    assert sorted(run.name for run in runs) == sorted(p.stem for p in checkpoints.CHECKPOINT_DIR.glob("*.pt"))
    stale = [run.name for run in runs if not checkpoints.is_current(run.name, run.config, run.train_fn)]
    assert not stale, f"run `make checkpoints` and commit: stale {stale}"


def test_a_checkpoint_key_follows_the_modules_its_run_imports(tmp_path):
    """Adding a section's module or editing a module no run imports leaves every key alone; editing a
    module a run imports changes that run's key only."""
    lib = tmp_path / "lib"
    shutil.copytree(Path(checkpoints.__file__).parent, lib)

    def digests():
        return {run: checkpoints.code_digest(lib / f"{run}.py") for run in ("base_model", "experiments")}

    def append(module, text="\n\ndef added():\n    return 1\n"):
        with open(lib / f"{module}.py", "a") as f:
            f.write(text)

    before = digests()
    (lib / "electra.py").write_text("from lib import objectives\n\n\ndef train_electra(config, desc):\n    pass\n")
    append("probes")
    append("schedule", "\nfrom lib import electra\n")
    assert digests() == before
    append("evals")    # the base model's validation loss
    after_evals = digests()
    assert after_evals["base_model"] != before["base_model"] and after_evals["experiments"] == before["experiments"]
    append("objectives")   # both read batches from it
    assert all(digests()[run] != after_evals[run] for run in before)
