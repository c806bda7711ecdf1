"""Training is bit-reproducible; the checkpoint cache retrains exactly when it must."""

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lib import base_model, checkpoints, schedule
from lib.checkpoints import Run

TINY = dict(base_model.BASE_MODEL, model=dict(vocab_size=44, context=96, d_model=16, n_layers=1, n_heads=2),
            steps=40, batch_size=8, eval_every=20)


@pytest.fixture(scope="module")
def trained_tiny(tmp_path_factory) -> Path:
    """A folder holding checkpoint tiny.pt of TINY, trained once (a training process costs seconds to start)."""
    directory = tmp_path_factory.mktemp("trained")
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, directory)
    return directory


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


def test_training_runs_on_pinned_kernels_whatever_the_callers_environment(tmp_path, trained_tiny):
    """The same checkpoint, asked for from a process started on other CPU kernels (the generic
    ATen and MKL code, oneDNN limited to SSE4.1): without the pin its weights differ."""
    other = dict(os.environ, ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", ONEDNN_MAX_CPU_ISA="SSE41")
    code = ("import sys; from pathlib import Path; from lib import base_model, checkpoints; "
            f"checkpoints.get_or_train('tiny', {TINY!r}, base_model.train_char_lm, Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], env=other, check=True,
                   cwd=Path(checkpoints.__file__).parent.parent, capture_output=True)
    assert (tmp_path / "other" / "tiny.pt").read_bytes() == (trained_tiny / "tiny.pt").read_bytes()


def test_parallel_training_gives_the_checkpoints_of_one_at_a_time(tmp_path, trained_tiny):
    runs = [Run(f"tiny{seed}", dict(TINY, seed=seed), base_model.train_char_lm) for seed in (0, 1)]
    assert checkpoints.train_missing(runs, processes=2, directory=tmp_path / "parallel") == ["tiny0", "tiny1"]
    assert set(checkpoints.recorded_seconds(tmp_path / "parallel")) == {"tiny0", "tiny1"}  # for the next schedule
    checkpoints.train_missing(runs[1:], processes=1, directory=tmp_path / "alone")
    # seed 0 is TINY itself, trained alone by the fixture (under another name: compare weights, log and key)
    assert schedule.same_checkpoint(tmp_path / "parallel" / "tiny0.pt", trained_tiny / "tiny.pt")
    assert (tmp_path / "parallel" / "tiny1.pt").read_bytes() == (tmp_path / "alone" / "tiny1.pt").read_bytes()
    assert checkpoints.train_missing(runs, directory=tmp_path / "parallel") == []  # all current: nothing trained


def test_an_interrupted_schedule_stops_its_runs_and_keeps_nothing_half_written(tmp_path):
    """Ctrl-C while two runs train: both training processes stop, their logs are removed, no partial file is
    left, the locks are free, and the unfinished runs are simply missing (the next schedule trains them)."""
    (tmp_path / "logs").mkdir()
    code = ("import signal, sys; from pathlib import Path; from lib import base_model, checkpoints; "
            "signal.signal(signal.SIGINT, signal.default_int_handler); "  # a background job starts with SIGINT ignored
            f"runs = [checkpoints.Run(f'tiny{{s}}', dict({TINY!r}, seed=s, steps=10 ** 6), base_model.train_char_lm) "
            "for s in (0, 1)]; checkpoints.train_missing(runs, 2, Path(sys.argv[1]))")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "out")], stderr=subprocess.PIPE,
                              cwd=Path(checkpoints.__file__).parent.parent, start_new_session=True,
                              env=dict(os.environ, TMPDIR=str(tmp_path / "logs")))

    def training():
        pattern = f"lib[.]checkpoints .*{tmp_path / 'out'}"  # the training processes' command lines
        return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()

    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("out/*.lock"))) < 2 and time.monotonic() < deadline:  # both runs are training
            time.sleep(0.2)
        time.sleep(1)
        assert len(training()) == 2
        parent.send_signal(signal.SIGINT)
        assert "KeyboardInterrupt" in parent.communicate(timeout=60)[1].decode()
        assert training() == []
        assert [p.name for p in (tmp_path / "out").iterdir() if p.suffix != ".lock"] == []
        assert list((tmp_path / "logs").iterdir()) == []
        for lock in (tmp_path / "out").glob("*.lock"):
            with open(lock) as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a lock were still held
    finally:  # whatever failed above, leave no process behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


def failing_train(config, desc):
    raise RuntimeError("this run is broken")


def test_a_failing_run_is_named_and_the_others_are_kept(tmp_path, capsys):
    runs = [Run("broken", TINY, failing_train), Run("fine", TINY, base_model.train_char_lm)]
    with pytest.raises(RuntimeError, match=r"training failed for \['broken'\]"):
        checkpoints.train_missing(runs, processes=2, directory=tmp_path)
    assert "this run is broken" in capsys.readouterr().err
    assert checkpoints.is_current("fine", TINY, base_model.train_char_lm, tmp_path)


def test_same_checkpoint_compares_weights_log_and_key_bit_for_bit(tmp_path):
    saved = {"key": "k", "state_dict": {"w": torch.tensor([1.0, 2.0])},
             "log": [{"step": 50, "recall": float("nan"), "loss": 0.1 + 0.2}]}
    torch.save(saved, tmp_path / "a.pt")
    torch.save(saved, tmp_path / "b.pt")  # a NaN in the log (a share of nothing) is the same NaN
    assert schedule.same_checkpoint(tmp_path / "a.pt", tmp_path / "b.pt")
    for changed in ({"log": [{"step": 50, "recall": float("nan"), "loss": 0.3}]},  # 0.1 + 0.2 != 0.3
                    {"state_dict": {"w": torch.tensor([1.0, 2.0 + 2 ** -22])}}, {"key": "j"}):
        torch.save(dict(saved, **changed), tmp_path / "b.pt")
        assert not schedule.same_checkpoint(tmp_path / "a.pt", tmp_path / "b.pt")


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


def test_is_current_says_whether_get_or_train_would_load(tmp_path, trained_tiny):
    assert not checkpoints.is_current("tiny", TINY, base_model.train_char_lm, tmp_path)
    assert checkpoints.is_current("tiny", TINY, base_model.train_char_lm, trained_tiny)
    assert not checkpoints.is_current("tiny", dict(TINY, steps=41), base_model.train_char_lm, trained_tiny)


def test_checking_or_loading_leaves_the_global_random_state_alone(trained_tiny):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checkpoints.is_current("tiny", TINY, base_model.train_char_lm, trained_tiny)
    checkpoints.get_or_train("tiny", TINY, base_model.train_char_lm, trained_tiny)
    assert torch.equal(torch.rand(3), expected)


def test_the_committed_checkpoints_are_exactly_the_declared_runs_and_current():
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


def test_recorded_seconds_keeps_only_whole_records(tmp_path):
    """A times file from before runs recorded their steps (name: seconds) guides nothing and breaks nothing."""
    (tmp_path / checkpoints.TIMES_FILE).write_text('{"old": 12.5, "new": {"seconds": 3.0, "steps": 40}}')
    assert checkpoints.recorded_seconds(tmp_path) == {"new": {"seconds": 3.0, "steps": 40}}
    (tmp_path / checkpoints.TIMES_FILE).write_text('{"torn": {"seconds": 3')
    assert checkpoints.recorded_seconds(tmp_path) == {}
