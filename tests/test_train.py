"""Training is bit-reproducible; the checkpoint cache retrains exactly when it must."""

from pathlib import Path

import torch

from lib import checkpoints, train

TINY = dict(train.BASE_MODEL, model=dict(vocab_size=44, context=96, d_model=16, n_layers=1, n_heads=2),
            steps=40, batch_size=8, eval_every=20)
calls = []


def counted_train(config, desc):
    calls.append(desc)
    return train.train_char_lm(config, desc)


def test_two_trainings_from_scratch_are_bit_identical():
    (a, log_a), (b, log_b) = train.train_char_lm(TINY), train.train_char_lm(TINY)
    assert log_a == log_b
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def test_training_lowers_the_loss():
    _, log = train.train_char_lm(dict(TINY, steps=100))
    assert log[-1]["val_loss"] < log[0]["val_loss"] - 0.3


def test_checkpoint_is_reused_then_retrained_when_corrupt_or_stale(tmp_path, capsys):
    calls.clear()
    model, log = checkpoints.get_or_train("tiny", TINY, counted_train, tmp_path)
    assert calls == ["tiny"] and "tiny.pt: missing; training 'tiny' from scratch" in capsys.readouterr().err
    first_bytes = (tmp_path / "tiny.pt").read_bytes()

    again, log_again = checkpoints.get_or_train("tiny", TINY, counted_train, tmp_path)
    assert calls == ["tiny"] and log_again == log and capsys.readouterr().err == ""
    assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), again.state_dict().values()))

    (tmp_path / "tiny.pt").write_bytes(first_bytes[: len(first_bytes) // 2])  # a torn write
    checkpoints.get_or_train("tiny", TINY, counted_train, tmp_path)
    err = capsys.readouterr().err
    message = err.splitlines()[0]  # one line, then the progress bar
    assert calls == ["tiny", "tiny"] and message.startswith("checkpoint tiny.pt: unreadable (")
    assert (tmp_path / "tiny.pt").read_bytes() == first_bytes  # the retrain is bit-identical, file included

    checkpoints.get_or_train("tiny", dict(TINY, steps=41), counted_train, tmp_path)
    assert calls == ["tiny"] * 3 and "tiny.pt: stale" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp"))


def test_checkpoint_key_ignores_comments_and_docstrings_but_not_code(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""doc"""\ndef f():\n    """doc"""\n    return 1  # comment\n')
    a = checkpoints._source_digest([source])
    source.write_text('"""other doc"""\ndef f():\n    return 1\n')
    assert checkpoints._source_digest([source]) == a
    source.write_text('def f():\n    return 2\n')
    assert checkpoints._source_digest([source]) != a


def test_checkpoint_key_covers_exactly_the_lib_modules_training_imports():
    names = {p.name for p in checkpoints.lib_dependencies(Path(train.__file__))}
    assert names == {"train.py", "models.py", "masks.py", "tokenizers.py", "world.py"}


def test_is_current_says_whether_get_or_train_would_load(tmp_path):
    assert not checkpoints.is_current("tiny", TINY, counted_train, tmp_path)
    checkpoints.get_or_train("tiny", TINY, counted_train, tmp_path)
    assert checkpoints.is_current("tiny", TINY, counted_train, tmp_path)
    assert not checkpoints.is_current("tiny", dict(TINY, steps=41), counted_train, tmp_path)


def test_is_current_leaves_the_global_random_state_alone(tmp_path):
    checkpoints.get_or_train("tiny", TINY, counted_train, tmp_path)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checkpoints.is_current("tiny", TINY, counted_train, tmp_path)
    assert torch.equal(torch.rand(3), expected)
