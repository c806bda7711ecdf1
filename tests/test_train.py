"""Training is bit-reproducible; the checkpoint cache retrains exactly when it must, and never in a test."""

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

from lib import recipes
from lib.recipes.base import BASE_MODEL
from lib.train import cache as checkpoints
from lib.train import processes
from lib.train.cache import Run, trainer
from lib.trainers.char_lm import train_char_lm

TINY = dict(BASE_MODEL, model=dict(vocab_size=44, context=96, d_model=16, n_layers=1, n_heads=2),
            steps=40, batch_size=8, eval_every=20)


@pytest.fixture(scope="module")
def trained_tiny(tmp_path_factory) -> Path:
    """A folder holding checkpoint tiny.pt of TINY, trained once (a training process costs seconds to start)."""
    directory = tmp_path_factory.mktemp("trained")
    processes.get_or_train(Run("tiny", TINY, train_char_lm), directory)
    return directory


@pytest.fixture(scope="module", autouse=True)
def training_allowed():
    """These tests train tiny runs into temporary folders on purpose (the suite forbids training elsewhere)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("BOOK_NO_TRAINING", raising=False)
        yield


def test_two_trainings_from_scratch_are_bit_identical():
    (a, log_a), (b, log_b) = train_char_lm(TINY), train_char_lm(TINY)
    assert log_a == log_b
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def test_training_lowers_the_loss():
    _, log = train_char_lm(dict(TINY, steps=100))
    assert log[-1]["val_loss"] < log[0]["val_loss"] - 0.3


def test_checkpoint_is_reused_then_retrained_when_corrupt_or_stale(tmp_path, capsys):
    model, log = processes.get_or_train(Run("tiny", TINY, train_char_lm), tmp_path)
    assert "tiny.pt: missing; training 'tiny' from scratch" in capsys.readouterr().err
    first_bytes = (tmp_path / "tiny.pt").read_bytes()

    again, log_again = processes.get_or_train(Run("tiny", TINY, train_char_lm), tmp_path)
    assert log_again == log and capsys.readouterr().err == ""  # loaded: no message, no progress bar
    assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), again.state_dict().values()))

    (tmp_path / "tiny.pt").write_bytes(first_bytes[: len(first_bytes) // 2])  # a torn write
    processes.get_or_train(Run("tiny", TINY, train_char_lm), tmp_path)
    message = capsys.readouterr().err.splitlines()[0]  # one line, then the progress bar
    assert message.startswith("checkpoint tiny.pt: unreadable (")
    assert (tmp_path / "tiny.pt").read_bytes() == first_bytes  # the retrain is bit-identical, file included

    processes.get_or_train(Run("tiny", dict(TINY, steps=41), train_char_lm), tmp_path)
    assert "tiny.pt: stale" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp"))


def test_training_runs_on_pinned_kernels_whatever_the_callers_environment(tmp_path, trained_tiny):
    """The same checkpoint, asked for from a process started on other CPU kernels (the generic
    ATen and MKL code, oneDNN limited to SSE4.1): without the pin its weights differ."""
    other = dict(os.environ, ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", ONEDNN_MAX_CPU_ISA="SSE41")
    code = ("import sys; from pathlib import Path; from lib.train import cache, processes; from lib.trainers.char_lm "
            f"import train_char_lm; processes.get_or_train(cache.Run('tiny', {TINY!r}, train_char_lm), Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], env=other, check=True,
                   cwd=Path(checkpoints.__file__).parents[2], capture_output=True)
    assert (tmp_path / "other" / "tiny.pt").read_bytes() == (trained_tiny / "tiny.pt").read_bytes()


def test_parallel_training_gives_the_checkpoints_of_one_at_a_time(tmp_path, trained_tiny):
    runs = [Run(f"tiny{seed}", dict(TINY, seed=seed), train_char_lm) for seed in (0, 1)]
    assert processes.train_missing(runs, processes=2, directory=tmp_path / "parallel") == ["tiny0", "tiny1"]
    assert set(processes.recorded_seconds(tmp_path / "parallel")) == {"tiny0", "tiny1"}  # for the next schedule
    processes.train_missing(runs[1:], processes=1, directory=tmp_path / "alone")
    # seed 0 is TINY itself, trained alone by the fixture (under another name: compare weights, log and key)
    assert processes.same_checkpoint(tmp_path / "parallel" / "tiny0.pt", trained_tiny / "tiny.pt")
    assert (tmp_path / "parallel" / "tiny1.pt").read_bytes() == (tmp_path / "alone" / "tiny1.pt").read_bytes()
    assert processes.train_missing(runs, directory=tmp_path / "parallel") == []  # all current: nothing trained


def test_an_interrupted_schedule_stops_its_runs_and_keeps_nothing_half_written(tmp_path):
    """Ctrl-C while two runs train: both training processes stop, their logs are removed, no partial file is
    left, the locks are free, and the unfinished runs are simply missing (the next schedule trains them)."""
    (tmp_path / "logs").mkdir()
    code = ("import signal, sys; from pathlib import Path; from lib.train import cache, processes; "
            "from lib.trainers.char_lm import train_char_lm; "
            "signal.signal(signal.SIGINT, signal.default_int_handler); "  # a background job starts with SIGINT ignored
            f"runs = [cache.Run(f'tiny{{s}}', dict({TINY!r}, seed=s, steps=10 ** 6), train_char_lm) "
            "for s in (0, 1)]; processes.train_missing(runs, 2, Path(sys.argv[1]))")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "out")], stderr=subprocess.PIPE,
                              cwd=Path(checkpoints.__file__).parents[2], start_new_session=True,
                              env=dict(os.environ, TMPDIR=str(tmp_path / "logs")))

    def training():
        pattern = f"lib[.]train[.]processes .*{tmp_path / 'out'}"  # the training processes' command lines
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


@trainer("broken", version=1)
def failing_train(config, parents=(), desc="train"):
    raise RuntimeError("this run is broken")


def test_a_failing_run_is_named_and_the_others_are_kept(tmp_path, capsys):
    runs = [Run("broken", TINY, failing_train), Run("fine", TINY, train_char_lm)]
    with pytest.raises(RuntimeError, match=r"training failed for \['broken'\]"):
        processes.train_missing(runs, processes=2, directory=tmp_path)
    assert "this run is broken" in capsys.readouterr().err
    assert checkpoints.is_current(Run("fine", TINY, train_char_lm), tmp_path)


def test_same_checkpoint_compares_weights_log_and_key_bit_for_bit(tmp_path):
    saved = {"key": "k", "state_dict": {"w": torch.tensor([1.0, 2.0])},
             "log": [{"step": 50, "recall": float("nan"), "loss": 0.1 + 0.2}]}
    torch.save(saved, tmp_path / "a.pt")
    torch.save(saved, tmp_path / "b.pt")  # a NaN in the log (a share of nothing) is the same NaN
    assert processes.same_checkpoint(tmp_path / "a.pt", tmp_path / "b.pt")
    said = {"log": "same weights; the log differs first at step 50, loss: 0.30000000000000004 vs 0.3",
            "state_dict": "weights differ (largest |difference| 2.4e-07, in w)", "key": "another key"}
    for changed in ({"log": [{"step": 50, "recall": float("nan"), "loss": 0.3}]},  # 0.1 + 0.2 != 0.3
                    {"state_dict": {"w": torch.tensor([1.0, 2.0 + 2 ** -22])}}, {"key": "j"}):
        torch.save(dict(saved, **changed), tmp_path / "b.pt")
        assert not processes.same_checkpoint(tmp_path / "a.pt", tmp_path / "b.pt")
        assert processes.checkpoint_difference(tmp_path / "a.pt", tmp_path / "b.pt") == said[next(iter(changed))]


def test_a_key_is_what_the_run_is_not_its_source():
    """Config, trainer name and version, parents' keys: each moves the key; the trainer's code does not."""
    run = Run("tiny", TINY, train_char_lm)
    key = checkpoints.checkpoint_key(run)

    @trainer("char_lm", version=1)
    def rewritten(config, parents=(), desc="train"):   # another function, the same declared trainer
        return train_char_lm(config, parents, desc)

    assert checkpoints.checkpoint_key(Run("tiny", TINY, rewritten)) == key
    assert checkpoints.checkpoint_key(Run("tiny", dict(TINY, seed=1), train_char_lm)) != key
    bumped = trainer("char_lm", version=2)(lambda config, parents=(), desc="train": None)
    assert checkpoints.checkpoint_key(Run("tiny", TINY, bumped)) != key
    child = Run("child", TINY, train_char_lm, parents=(run,))
    assert checkpoints.checkpoint_key(child) != checkpoints.checkpoint_key(
        Run("child", TINY, train_char_lm, parents=(Run("tiny", dict(TINY, seed=1), train_char_lm),)))
    with pytest.raises(TypeError, match="not declared with @trainer"):
        Run("undeclared", TINY, lambda config: None)


def test_a_loader_under_test_never_trains(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_NO_TRAINING", "1")
    with pytest.raises(checkpoints.StaleCheckpoint, match=r"checkpoint tiny\.pt is missing; training is off"):
        processes.get_or_train(Run("tiny", TINY, train_char_lm), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_is_current_says_whether_get_or_train_would_load(tmp_path, trained_tiny):
    assert not checkpoints.is_current(Run("tiny", TINY, train_char_lm), tmp_path)
    assert checkpoints.is_current(Run("tiny", TINY, train_char_lm), trained_tiny)
    assert not checkpoints.is_current(Run("tiny", dict(TINY, steps=41), train_char_lm), trained_tiny)


def test_checking_or_loading_leaves_the_global_random_state_alone(trained_tiny):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checkpoints.is_current(Run("tiny", TINY, train_char_lm), trained_tiny)
    processes.get_or_train(Run("tiny", TINY, train_char_lm), trained_tiny)
    assert torch.equal(torch.rand(3), expected)


def test_the_committed_checkpoints_are_exactly_the_declared_runs_and_current():
    runs = recipes.all_runs()
    assert sorted(run.name for run in runs) == sorted(p.stem for p in checkpoints.CHECKPOINT_DIR.glob("*.pt"))
    stale = [run.name for run in runs if not checkpoints.is_current(run)]
    assert not stale, f"run `make checkpoints` and commit: stale {stale}"
    unguarded = [run.name for run in runs if "losses" not in checkpoints.read(checkpoints.path_of(run))["fingerprint"]]
    assert not unguarded, f"checkpoints without a fingerprint: {unguarded}"


def test_recorded_seconds_keeps_only_whole_records(tmp_path):
    """A times file from before runs recorded their steps (name: seconds) guides nothing and breaks nothing."""
    (tmp_path / processes.TIMES_FILE).write_text('{"old": 12.5, "new": {"seconds": 3.0, "steps": 40}}')
    assert processes.recorded_seconds(tmp_path) == {"new": {"seconds": 3.0, "steps": 40}}
    (tmp_path / processes.TIMES_FILE).write_text('{"torn": {"seconds": 3')
    assert processes.recorded_seconds(tmp_path) == {}


def test_the_roster_lists_every_run_once_with_its_parameters():
    rows = recipes.roster()
    listed = [(r["run"], seed) for r in rows for seed in r["seeds"]]
    assert len(listed) == len(set(listed)) == len(recipes.all_runs())
    # parameters are counted in the checkpoint, a tied matrix once: the base model's are §02's 109,056
    from lib.nn.models import TinyGPT, ModelConfig
    base = next(r for r in rows if r["run"] == "base")
    assert base["params"] == sum(p.numel() for p in TinyGPT(ModelConfig(**BASE_MODEL["model"])).parameters())
