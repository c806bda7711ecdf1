"""What a replay of a run's first K steps must reproduce: the guard of a trainer's declared version.

    with recording(steps=100) as fingerprint:        # `fit` fills it in as it trains
        model, log = train_fn(config)
    fingerprint.result                               # {"steps", "losses", "learning_rates", "weights", ...}
    deviation(saved, replayed)                       # (largest relative difference, where it is)

A checkpoint's key names its trainer and the version the trainer declares, not
its source code, so a refactor retrains nothing.  What keeps a version honest
is this record, stored in every checkpoint: the training loss of each of the
first K steps, a summary of the weights at step K, the learning rate of every
step (the schedule is a pure function of the config) and the evaluation at
step K.  Replaying K steps of the same trainer on the same config must give the
same numbers: bit for bit on the CPU that trained it, and within `TOLERANCE` on
any other x86-64 CPU (float rounding differs by vendor and instruction set, and
training amplifies it step by step; the tolerance is measured, see
CONTRIBUTING.md).  A change of behaviour moves them by orders of magnitude more.
"""

import contextlib
import hashlib
import math
import re

import torch

from lib.nn.models import CrossAttention, ModelConfig, SelfAttention

TOLERANCE = 1e-4      # |replayed - saved| / max(1, |saved|) allowed for losses, weights and the evaluation's floats,
# / |saved| for rates; except for the evaluation's shares of a few hundred items (SHARES: the last name of the
# number's path): an accuracy over 100 reviews moves in steps of 0.01, a probability rounded to 3 decimals in
# steps of 0.001 and an expert's share of the tokens by one token's worth, so one rounding difference on another
# CPU may flip one of them.  A new kind of share is strict until it is named here.  Integers of the evaluation
# (token ids, counts) are not compared: a sample drawn on another CPU may differ (see CONTRIBUTING.md)
EVALUATION_TOLERANCE = 0.02
SHARES = re.compile(r"accuracy|recall|share|false_alarm|p_replaced|probe_|copy_rate|per_position|load|dropped|stopped"
                    r"|old_questions")
# Numbers read off the model's own samples (section 11's true rate of sampled reviews and the KL estimated on them):
# one draw that another CPU's rounding sends elsewhere changes them by a whole sample's worth, so, like the
# evaluation's integers, they are not compared.
SAMPLED = re.compile(r"true_rate|kl")
STEPS = 50            # the most steps a fingerprint covers by default: replays on other CPUs stay within tolerance
_ACTIVE = []          # the recorder `fit` reports to, if any (a stack: one training at a time)


class Recorder:
    """Collects one fingerprint while `fit` trains: the losses of the first `steps` steps, then, at step
    `steps`, the weights and the evaluation.  With stop=True `fit` stops there (a replay)."""

    def __init__(self, steps: int, stop: bool):
        self.steps, self.stop, self.losses, self.result = steps, stop, [], None

    def step(self, step: int, loss: float, model, config: dict, schedule, evaluation):
        """Called by `fit` after every optimizer step; evaluation() gives the numbers at this step."""
        if step < self.steps:
            self.losses.append(loss)
        if step + 1 == self.steps:
            self.result = {"steps": self.steps, "losses": self.losses,
                           "learning_rates": [schedule(s, config) for s in range(config["steps"])],
                           "weights": weight_summary(model), "weights_sha256": weights_sha256(model),
                           "evaluation": numbers(evaluation())}


@contextlib.contextmanager
def recording(steps: int, stop: bool = False):
    """Record the fingerprint of the training run inside this block (see the module docstring)."""
    recorder = Recorder(steps, stop)
    _ACTIVE.append(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.remove(recorder)


def active():
    """The recorder of the enclosing `recording` block, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def key_biases(model) -> dict:
    """{parameter name: the slice of it that is a key bias}, for every attention module of the model.

    A key bias adds q·b to every score of a query's row, and softmax does not change when a whole row shifts:
    its gradient is zero in exact arithmetic.  In floats it is rounding noise, and Adam divides the gradient by
    its own running size, so that noise becomes steps of about the learning rate.  Those elements therefore
    wander with the CPU's rounding (seen: 1.6e-3 apart after the reader's 50 steps on generic kernels, while
    its query and value biases agree to 1e-7) and say nothing about what the trainer computes.

    >>> key_biases(SelfAttention(ModelConfig(d_model=8, n_heads=2)))
    {'qkv.bias': slice(8, 16, None)}
    """
    found = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        qkv = getattr(getattr(module, "qkv", None), "base", getattr(module, "qkv", None))   # LoRA wraps it
        if isinstance(module, SelfAttention) and qkv.bias is not None:
            d = qkv.bias.numel() // 3                        # (q | k | v) biases side by side
            found[f"{prefix}qkv.{'base.' * (qkv is not module.qkv)}bias"] = slice(d, 2 * d)
        elif isinstance(module, CrossAttention) and module.kv.bias is not None:
            d = module.kv.bias.numel() // 2                  # (k | v)
            found[f"{prefix}kv.bias"] = slice(0, d)
    return found


def weight_summary(model) -> list:
    """Two numbers per tensor: its mean and its projection on a fixed random direction (unit length),
    so that a change to any element shows, and a rounding difference stays small.  Key biases are left out
    (`key_biases`: they follow the CPU's rounding, not the trainer); `weights_sha256` covers every bit.

    >>> len(weight_summary(torch.nn.Linear(3, 2)))
    4
    """
    summary, gauge = [], key_biases(model)
    for name, tensor in sorted(model.state_dict().items()):
        values = tensor.detach().double().flatten()
        if name in gauge:
            keep = torch.ones(values.numel(), dtype=torch.bool)
            keep[gauge[name]] = False
            values = values[keep]
        direction = torch.randn(values.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.double)
        summary += [values.mean().item(), (values @ direction).item() / math.sqrt(values.numel())]
    return summary


def weights_sha256(model) -> str:
    """The exact bits of every tensor (names included)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def numbers(value):
    """The numbers of a log row, nested as they are (strings and other non-numbers dropped)."""
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items() if numbers(v) is not None}
    if isinstance(value, (list, tuple)):
        return [numbers(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _flat(value, where=""):
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _flat(value[k], f"{where}.{k}" if where else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _flat(v, f"{where}[{i}]")
    else:
        yield where, value


def deviation(saved: dict, replayed: dict) -> tuple:
    """(largest |replayed - saved| / max(1, |saved|) divided by its tolerance, where, that difference) over the
    numbers of two fingerprints: within tolerance when the first is at most 1.  A number missing on one side
    counts as infinitely far; NaN equals NaN; integers of the evaluation and its SAMPLED numbers are skipped.

    >>> deviation({"losses": [2.0, 1.0]}, {"losses": [2.0, 1.00001]})[1:]
    ('losses[1]', 1.0000000000065512e-05)
    >>> deviation({"losses": [2.0]}, {"losses": [2.0, 1.0]})[0]
    inf
    """
    keys = ("losses", "learning_rates", "weights", "evaluation", "steps")
    a = dict(_flat({k: saved.get(k) for k in keys}))
    b = dict(_flat({k: replayed.get(k) for k in keys}))
    worst = (0.0, "", 0.0)
    for where in sorted(a.keys() | b.keys()):
        x, y = a.get(where), b.get(where)
        evaluation = where.startswith("evaluation")
        if (x is None and y is None) or (evaluation and isinstance(x, int) and isinstance(y, int)):
            continue
        if evaluation and SAMPLED.fullmatch(where.rpartition(".")[2]):
            continue
        if x is None or y is None:
            return math.inf, where, math.inf
        if math.isnan(x) and math.isnan(y):
            continue
        scale = abs(x) if where.startswith("learning_rates") else max(1.0, abs(x))   # rates are ~1e-3
        d = (abs(y - x) / scale if scale else float(y != x)) if not (math.isnan(x) or math.isnan(y)) else math.inf
        share = evaluation and SHARES.search(where.rpartition(".")[2]) is not None
        ratio = d / (EVALUATION_TOLERANCE if share else TOLERANCE)
        if ratio > worst[0]:
            worst = (ratio, where, d)
    return worst
