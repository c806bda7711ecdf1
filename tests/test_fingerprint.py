"""The fingerprint gate: a replay of a run's first steps passes a pure refactor and catches a change of behaviour
(a loss, a batch function, a schedule) that was not declared by bumping the trainer's version."""

import pytest
import torch
import torch.nn.functional as F

from lib.recipes.base import BASE_MODEL
from lib.train import fingerprint, loop, processes
from lib.train.cache import Run
from lib.trainers import char_lm

TINY = dict(BASE_MODEL, model=dict(vocab_size=44, context=96, d_model=16, n_layers=1, n_heads=2),
            steps=60, batch_size=8, eval_every=20)
RUN = Run("tiny", TINY, char_lm.train_char_lm)


@pytest.fixture(scope="module")
def saved() -> dict:
    """The fingerprint recorded while the tiny run trained, whole (what a checkpoint stores)."""
    model, log, fp = processes.train_with_fingerprint(RUN)
    assert fp["steps"] == 20 and len(fp["losses"]) == 20 and len(fp["learning_rates"]) == 60
    assert fp["evaluation"] == {"val_loss": log[0]["val_loss"]}    # step 20 is the first log row
    return fp


def replay() -> dict:
    return processes.train_with_fingerprint(RUN, stop=True)[2]


def test_a_replay_reproduces_the_training_bit_for_bit_and_stops_at_k(saved):
    replayed = replay()
    assert fingerprint.deviation(saved, replayed) == (0.0, "", 0.0)   # the same machine, the same kernels: exact
    assert replayed["weights_sha256"] == saved["weights_sha256"]


def test_a_pure_refactor_passes(saved, monkeypatch):
    def next_token_loss(model, windows):            # the same loss, written another way
        inputs, targets = windows[:, :-1], windows[:, 1:]
        logits = model(inputs)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    monkeypatch.setattr(char_lm, "next_token_loss", next_token_loss)
    assert fingerprint.deviation(saved, replay())[0] <= 1


def changed(saved, monkeypatch, module, name, replacement) -> tuple:
    monkeypatch.setattr(module, name, replacement)
    ratio, where, worst = fingerprint.deviation(saved, replay())
    assert ratio > 10, (name, worst, where)      # far past the tolerance (CONTRIBUTING.md: the measured margins)
    return ratio, where


def test_a_changed_loss_is_caught(saved, monkeypatch):
    original = char_lm.next_token_loss
    ratio, where = changed(saved, monkeypatch, char_lm, "next_token_loss",
                           lambda model, windows: original(model, windows) * 1.01)   # a 1 % reweighting
    assert where.startswith("losses")


def test_a_changed_batch_function_is_caught(saved, monkeypatch):
    original = char_lm.random_windows
    changed(saved, monkeypatch, char_lm, "random_windows",                # windows one character shorter
            lambda stream, length, batch_size, generator: original(stream, length - 1, batch_size, generator))


def test_a_changed_schedule_is_caught(saved, monkeypatch):
    original = loop.learning_rate
    ratio, where = changed(saved, monkeypatch, loop, "learning_rate",     # warm-up one step longer
                           lambda step, config: original(step, dict(config, warmup=config["warmup"] + 1)))
    assert where.startswith("learning_rates")         # the schedule itself is compared, step by step


def test_a_different_evaluation_is_caught(saved):
    moved = dict(saved, evaluation={"val_loss": saved["evaluation"]["val_loss"] * 1.001})   # a loss: strict
    ratio, where, _ = fingerprint.deviation(saved, moved)
    assert ratio > 1 and where == "evaluation.val_loss"
    shares = {"evaluation": {"rating_accuracy": 0.62, "val_loss": 1.5}}    # one review of 100 flips: allowed
    assert fingerprint.deviation(shares, {"evaluation": {"rating_accuracy": 0.63, "val_loss": 1.5}})[0] <= 1
    assert fingerprint.deviation(shares, {"evaluation": {"rating_accuracy": 0.66, "val_loss": 1.5}})[0] > 1
    assert fingerprint.deviation(saved, dict(saved, evaluation={}))[0] == float("inf")


def test_the_weight_summary_sees_one_element(saved):
    model = torch.nn.Linear(8, 8)
    before = fingerprint.weight_summary(model)
    with torch.no_grad():
        model.weight[3, 5] += 1e-2
    after = fingerprint.weight_summary(model)
    assert max(abs(a - b) for a, b in zip(before, after)) > 1e-3


def test_the_gate_names_the_trainer_to_bump_and_what_the_bump_retrains(monkeypatch, capsys):
    from lib import recipes
    from lib.recipes import __main__ as cli
    from lib.train import cache

    run = recipes.run("compare_gpt")
    stored = cache.read(cache.path_of(run))["fingerprint"]
    drifted = dict(stored, losses=[x * 1.01 for x in stored["losses"]], seconds=0.0)   # what a changed loss gives
    monkeypatch.setattr(processes, "replay_fingerprints", lambda runs, n: {run.name: drifted})
    assert cli.check_fingerprints([run], 1) is False
    out = capsys.readouterr().out
    def retrained(r):   # a run of the trainer, or one that starts from one (section 08's adaptations)
        return r.train_fn.trainer_name == "comparison" or any(retrained(p) for p in r.parents)
    same = sum(retrained(r) for r in recipes.all_runs())
    assert out.startswith(f"FAIL compare_gpt: the replay of its first {stored['steps']} steps deviates")
    assert f"bump @trainer('comparison', version=2) in lib/trainers/comparison.py: that retrains {same} runs" in out

    monkeypatch.setattr(processes, "replay_fingerprints", lambda runs, n: {run.name: dict(stored, seconds=0.0)})
    assert cli.check_fingerprints([run], 1) is True
    assert capsys.readouterr().out.startswith(f"ok   compare_gpt: {stored['steps']} steps replayed")


def test_the_weight_summary_leaves_out_key_biases_and_nothing_else():
    from lib.nn.models import EncoderDecoder, ModelConfig

    model = EncoderDecoder(ModelConfig(vocab_size=20, context=8, d_model=8, n_layers=1, n_heads=2))
    assert set(fingerprint.key_biases(model)) == {"encoder.0.attn.qkv.bias", "decoder.0.attn.qkv.bias",
                                                   "decoder.0.cross.kv.bias"}
    before = fingerprint.weight_summary(model)
    with torch.no_grad():
        model.decoder[0].attn.qkv.bias[8:16] += 1.0      # the key bias: softmax does not see it
        model.decoder[0].cross.kv.bias[:8] += 1.0
    assert fingerprint.weight_summary(model) == before
    with torch.no_grad():
        model.decoder[0].cross.kv.bias[8] += 1e-2        # a value bias: it changes what the model computes
    assert fingerprint.weight_summary(model) != before


def tiny_between_rows(network: str) -> dict:
    """A tiny run whose fingerprint (K = 10) falls between its log rows (every 12 steps)."""
    from lib.recipes.moe import run_config

    if network == "moe":
        moe = run_config("moe_top1")
        return dict(moe, model=dict(moe["model"], d_model=16, n_heads=2, n_layers=1), steps=24, batch_size=4,
                    eval_every=12)
    return dict(TINY, steps=24, batch_size=4, eval_every=12, warmup=0, lr=1e-2, log_steps=True)   # §02's runs


@pytest.mark.parametrize("network", ["moe", "log_steps"])
def test_recording_a_fingerprint_between_log_rows_leaves_the_log_alone(network):
    """A replay's evaluation at step K < eval_every must not disturb what the log's first row sums (an MoE's
    routing shares, §02's per-step losses and stream lengths), and it covers what those rows log."""
    config = tiny_between_rows(network)
    assert char_lm.fingerprint_steps(config) == 10 < config["eval_every"]
    plain = char_lm.train_char_lm(config)[1]
    _, recorded, fp = processes.train_with_fingerprint(Run(f"tiny_{network}", config, char_lm.train_char_lm))
    assert plain == recorded
    if network == "moe":
        assert plain[0]["dropped"] and "dropped" in fp["evaluation"]
    else:
        assert [len(row["step_losses"]) for row in plain] == [12, 12]
        assert fp["evaluation"]["step_losses"] == plain[0]["step_losses"][:10] == fp["losses"]
        assert len(fp["evaluation"]["stream_lengths"]) == 10
